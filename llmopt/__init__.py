"""llmopt: optimal schedules, proven lower bounds and heuristic replays for LLM inference."""

__version__ = "0.1.0"

from llmopt.errors import LlmoptError
from llmopt.instance import Instance, Request, System, load_instance
from llmopt.result import Result, read_solution
from llmopt.solve import solve

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
