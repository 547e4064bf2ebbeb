"""Huang et al. 2025, eqs 14–16 (after Cheng et al. 2024): prefill and per-token decode times
bilinear in batch size and length."""

from __future__ import annotations

from typing import Literal

from llmopt.data.cost.base import Coefficient, CostProfile, Tokens, _Strict


class BilinearCoefficients(_Strict):
    alpha: Coefficient
    beta: Coefficient
    gamma: Coefficient
    delta: Coefficient

    def __call__(self, batch: float, length: float) -> float:
        return self.alpha * batch * length + self.beta * batch + self.gamma * length + self.delta


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
