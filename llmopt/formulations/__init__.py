"""Optimization problems, one module each, with the paper's equation numbers in docstrings."""

from llmopt.formulations import binpacking

PROBLEMS = {
    "binpacking": binpacking,
}

__all__ = ["PROBLEMS"]
