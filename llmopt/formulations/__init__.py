"""Optimization problems, one module each, with the paper's equation numbers in docstrings."""

from llmopt.formulations import binpacking, pd_competition

PROBLEMS = {
    "binpacking": binpacking,
    "pd-competition": pd_competition,
}

__all__ = ["PROBLEMS"]
