"""What every cost profile has: a name, its family, and the source its numbers come from; and
the per-request mapping that lets a profile with a bilinear per-batch predictor time the
simulation's iterations (``per_request_iteration_ms``)."""

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

    @property
    def policy_family(self) -> str:
        """The family whose policies replay on this profile: its own, unless it times the same
        iterations as another family by another cost function (``roofline``: the infermax
        family's iterations)."""
        return self.family

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
    roofline, pang_linear) have it."""

    def iteration_ms(self, prefill_tokens: int, decodes: int, decode_kv: float, units: float,
                     chunks: int) -> float: ...

    def decode_iteration_costs(self, decodes: int) -> tuple[float, float]: ...


#: (c1, c2, c3, c4) of a per-batch predictor c1·N·L + c2·N + c3·L + c4 at batch size N and
#: length L (ms): Cheng et al. 2024's eq 3 (prefill, p1..p4) and eq 4 (one decode iteration,
#: d1..d4); Huang et al. 2025's eqs 14 and 15 (α, β, γ, δ) are the same form
BilinearTerms = tuple[float, float, float, float]


def per_request_decode_costs(decode: BilinearTerms, decodes: int) -> tuple[float, float]:
    """A decode-only iteration of d = ``decodes`` requests reading K cached KVs in all lasts
    per_batch + per_kv·K: the decode form at N = d and l = (K + d)/d (the mean length with the
    token being produced), c1·(K + d) + c2·d + c3·(K + d)/d + c4, i.e. per_batch =
    c1·d + c2·d + c3 + c4 and per_kv = c1 + c3/d."""
    c1, c2, c3, c4 = decode
    return c1 * decodes + c2 * decodes + c3 + c4, c1 + c3 / decodes


def per_request_iteration_ms(prefill: BilinearTerms, decode: BilinearTerms, prefill_tokens: int,
                             decodes: int, decode_kv: float, chunks: int) -> float:
    """One iteration of the simulation timed by per-batch predictors of the form c1·N·L + c2·N +
    c3·L + c4 (``BilinearTerms``), chosen so that a static batch of equal requests is timed as
    the predictor times it:

    - prefill: ``chunks`` = N requests and P = ``prefill_tokens`` prompt tokens at N and L =
      P/N (the mean chunk), c1·P + c2·N + c3·P/N + c4 (a cached prefix of a chunk is not
      counted: the predictor has no term for it);
    - decode: ``decodes`` = d requests reading K = ``decode_kv`` KVs (``per_request_decode_costs``);
    - both in one iteration (a mixed batch, which the papers' static batches never form): the
      sum, the time of running the two parts one after the other (no term for their overlap).

    0 for an empty iteration. Used by the ``bilinear`` (Huang et al. eqs 14–15) and ``scls``
    (Cheng et al. eqs 3–4) profiles."""
    total = 0.0
    if chunks > 0 and prefill_tokens > 0:
        c1, c2, c3, c4 = prefill
        total += c1 * prefill_tokens + c2 * chunks + c3 * prefill_tokens / chunks + c4
    if decodes > 0:
        per_batch, per_kv = per_request_decode_costs(decode, decodes)
        total += per_batch + per_kv * decode_kv
    return total
