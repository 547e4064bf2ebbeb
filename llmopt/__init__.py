"""llmopt: optimal schedules, proven lower bounds and heuristic replays for LLM inference."""

from llmopt.data.instance import Instance, Request, System, load_instance
from llmopt.errors import LlmoptError
from llmopt.policies.replay import replay
from llmopt.problems.api import solve
from llmopt.result import Result, read_solution
from llmopt.version import __version__

__all__ = [
    "Instance",
    "LlmoptError",
    "Request",
    "Result",
    "System",
    "__version__",
    "load_instance",
    "read_solution",
    "replay",
    "solve",
]
