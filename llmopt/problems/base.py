"""What every problem family shares: lower bounds with the time model they hold under."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Bound:
    """One lower bound on total inference time (ms) with its parts."""

    name: str
    value_ms: float
    equation: str
    valid_under: str
    why: str
    time_model: str
    parts: dict[str, float] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
