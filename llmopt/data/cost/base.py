"""What every cost profile has: a name, its family, and the source its numbers come from."""

from __future__ import annotations

from typing import Annotated, Protocol

from pydantic import BaseModel, ConfigDict, Field

NonNegFloat = Annotated[float, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CostProfile(_Strict):
    """Fields every profile has."""

    name: str
    family: str
    source: str = Field(min_length=1)

    def describe(self) -> str:
        return f"{self.name} ({self.family})"


class IterationCosts(Protocol):
    """What the simulation reads of a profile: the families that time iterations (infermax,
    pang_linear) have it."""

    def iteration_ms(self, prefill_tokens: int, decodes: int, decode_kv: float, units: float,
                     chunks: int) -> float: ...

    def decode_iteration_costs(self, decodes: int) -> tuple[float, float]: ...
