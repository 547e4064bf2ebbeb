"""What every cost profile has: a name, its family, and the source its numbers come from."""

from __future__ import annotations

from typing import Annotated, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from llmopt.data.ranges import MAX_CLIENTS, MAX_MS, MAX_TOKENS

Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Clients = Annotated[int, Field(ge=1, le=MAX_CLIENTS)]
NonNegFloat = Annotated[float, Field(ge=0, le=MAX_MS)]
Coefficient = Annotated[float, Field(ge=-MAX_MS, le=MAX_MS)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class CostProfile(_Strict):
    """Fields every profile has."""

    name: str
    family: str
    source: str = Field(min_length=1)

    def describe(self) -> str:
        return f"{self.name} ({self.family})"

    def time_coefficients(self) -> list[float]:
        """The coefficients the family's times are made of (ms)."""
        return []

    @model_validator(mode="after")
    def _some_time_nonzero(self) -> CostProfile:
        coefficients = self.time_coefficients()
        if coefficients and not any(coefficients):
            raise ValueError("every time coefficient is 0: every schedule would take 0 ms")
        return self


class IterationCosts(Protocol):
    """What the simulation reads of a profile: the families that time iterations (infermax,
    pang_linear) have it."""

    def iteration_ms(self, prefill_tokens: int, decodes: int, decode_kv: float, units: float,
                     chunks: int) -> float: ...

    def decode_iteration_costs(self, decodes: int) -> tuple[float, float]: ...
