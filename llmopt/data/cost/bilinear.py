"""Huang et al. 2025, eqs 14–16 (after Cheng et al. 2024): prefill and per-token decode times
bilinear in batch size and length.

The predictor is per request (request i in a batch of b); the simulation core times whole
iterations from their aggregates (``IterationCosts``). The mapping, chosen so that a batch of
one request reproduces eqs 14–16 exactly:

- a prefill iteration of ``chunks`` = b requests and P prompt tokens lasts eq 14 at batch b and
  length l = P / b (the mean prompt): α_p·P + β_p·b + γ_p·P/b + δ_p, which is eq 14 exactly when
  the b prompts are equally long (a cached prefix of a refill or chunk is not counted: eq 14
  has no term for it);
- a decode iteration of d requests that read K cached KVs (Σ m) lasts eq 15 at batch d and
  accumulated length l_a = (K + d) / d, the mean length *with* the token being produced: the
  k-th decode of a request of l_i prompt tokens reads l_i + k − 1 KVs and eq 16 charges it
  τ_d(b, l_i + k). It is α_d·(K + d) + β_d·d + γ_d·(K + d)/d + δ_d, linear in K for fixed d
  (``decode_iteration_costs``);
- a mixed iteration (prefill chunks and decodes together, which the paper's static batches and
  vLLM's default scheduler never form) lasts the sum of the two parts: the predictor has no
  term for their overlap, and the sum is the time of running them one after the other.

Token semantics: eq 16 sums l_o decode steps after the prefill, so the policies that replay on
this family take the first output token from the first decode (``first_token_from_prefill =
False``), as in Pang et al.'s stage model; the replayed TTFT is then eq 8 + τ_d(b, l_i + 1).

KV memory: the predictor has none. The replica's KV capacity is ``system.kv_capacity`` when the
instance gives one (Algorithm 2's memory, eq 20, in tokens), else unlimited.
"""

from __future__ import annotations

from typing import Literal

from llmopt.data.cost.base import (
    BilinearTerms,
    Coefficient,
    CostProfile,
    Tokens,
    _Strict,
    per_request_decode_costs,
    per_request_iteration_ms,
)


class BilinearCoefficients(_Strict):
    alpha: Coefficient
    beta: Coefficient
    gamma: Coefficient
    delta: Coefficient

    def __call__(self, batch: float, length: float) -> float:
        return self.alpha * batch * length + self.beta * batch + self.gamma * length + self.delta

    def terms(self) -> BilinearTerms:
        """(α, β, γ, δ) as the (c1, c2, c3, c4) of ``per_request_iteration_ms``."""
        return self.alpha, self.beta, self.gamma, self.delta


class BilinearProfile(CostProfile):
    """Bilinear latency predictor of Huang et al. 2025, eqs 14–16."""

    family: Literal["bilinear"]
    prefill: BilinearCoefficients
    decode: BilinearCoefficients
    valid_max_tokens: Tokens | None = None

    def time_coefficients(self) -> list[float]:
        return [c.alpha for c in (self.prefill, self.decode)] + [
            v for c in (self.prefill, self.decode) for v in (c.beta, c.gamma, c.delta)]

    def prefill_ms(self, batch: int, input_tokens: int) -> float:
        """Eq 14: prefill time of a request of ``input_tokens`` in a batch of ``batch``."""
        return self.prefill(batch, input_tokens)

    def decode_step_ms(self, batch: int, accumulated_tokens: int) -> float:
        """Eq 15: time of one decode step (one token) at batch size and accumulated length."""
        return self.decode(batch, accumulated_tokens)

    def request_decode_ms(self, batch: int, input_tokens: int, output_tokens: int) -> float:
        """Eq 16: sum of eq 15 over the request's output tokens (closed form)."""
        n = output_tokens
        lengths = n * input_tokens + n * (n + 1) / 2
        d = self.decode
        return (d.alpha * batch + d.gamma) * lengths + n * (d.beta * batch + d.delta)

    def iteration_ms(self, prefill_tokens: int, decodes: int, decode_kv: float, units: float,
                     chunks: int) -> float:
        """An iteration of the simulation (see the module doc and
        ``base.per_request_iteration_ms``): eq 14 at b = ``chunks``, l = ``prefill_tokens`` / b,
        plus eq 15 at b = ``decodes``, l_a = (``decode_kv`` + b) / b; ``units`` (Σ(c² + 2mc))
        is not read. 0 for an empty iteration."""
        return per_request_iteration_ms(self.prefill.terms(), self.decode.terms(),
                                        prefill_tokens, decodes, decode_kv, chunks)

    def decode_iteration_costs(self, decodes: int) -> tuple[float, float]:
        """A decode-only iteration of d = ``decodes`` requests reading K KVs lasts per_batch +
        per_kv·K (eq 15 at b = d, l_a = (K + d)/d): per_batch = α_d·d + β_d·d + γ_d + δ_d,
        per_kv = α_d + γ_d/d."""
        return per_request_decode_costs(self.decode.terms(), decodes)
