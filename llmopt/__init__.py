"""llmopt: optimal schedules, proven lower bounds and heuristic replays for LLM inference."""

__version__ = "0.1.0"

from llmopt.errors import LlmoptError
from llmopt.instance import Instance, Request, System, load_instance
from llmopt.result import Result, read_solution


def __getattr__(name: str):
    # the solvers (Pyomo, OR-Tools, HiGHS) load on first use, not with every replay
    if name == "solve":
        from llmopt.solve import solve

        return solve
    raise AttributeError(f"module 'llmopt' has no attribute {name!r}")


__all__ = [
    "Instance",
    "LlmoptError",
    "Request",
    "Result",
    "System",
    "__version__",
    "load_instance",
    "read_solution",
    "solve",
]
