"""Scheduling policies of the replay engines, one module per scheduler family."""
