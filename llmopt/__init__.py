"""llmopt: optimal schedules, proven lower bounds and heuristic replays for LLM inference.

The names below load on first use (``llmopt.solve`` imports the solver front end when it is
first read), so that importing a part of llmopt does not import all of it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from llmopt.version import __version__

if TYPE_CHECKING:
    from llmopt.data.instance import Instance, Request, System, load_instance
    from llmopt.errors import LlmoptError
    from llmopt.policies.replay import replay
    from llmopt.problems.api import solve
    from llmopt.result import Result, read_solution

_WHERE = {
    "Instance": "llmopt.data.instance", "Request": "llmopt.data.instance",
    "System": "llmopt.data.instance", "load_instance": "llmopt.data.instance",
    "LlmoptError": "llmopt.errors", "replay": "llmopt.policies.replay",
    "solve": "llmopt.problems.api", "Result": "llmopt.result",
    "read_solution": "llmopt.result",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'llmopt' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


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
