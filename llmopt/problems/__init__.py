"""Optimization problems (per paper), their registry, and the solve front end."""
