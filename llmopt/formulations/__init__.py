"""Optimization problems, one module each, with the paper's equation numbers in docstrings."""

from llmopt.formulations import binpacking, infermax_csp, pd_competition

PROBLEMS = {
    "binpacking": binpacking,
    "pd-competition": pd_competition,
    "infermax-csp": infermax_csp,
}

__all__ = ["PROBLEMS"]
