"""Instances (requests, system, limits), traces and cost profiles."""
