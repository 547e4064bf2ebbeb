"""Pang et al. 2025, section V.A: a prefill stage costs ``overhead + per_token × tokens``; a
decode round costs ``overhead + per_client × clients decoding`` (one token per client). The
first output token comes from the first decode round (eq 8)."""

from __future__ import annotations

from typing import Literal

from llmopt.data.cost.base import Clients, CostProfile, NonNegFloat, Tokens, _Strict


class LinearStage(_Strict):
    overhead_ms: NonNegFloat
    per_token_ms: NonNegFloat


class LinearRound(_Strict):
    overhead_ms: NonNegFloat
    per_client_ms: NonNegFloat


class KvCache(_Strict):
    blocks: Tokens
    block_size: Tokens

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_size


class PangLinearProfile(CostProfile):
    """Stage-level linear cost model of the PD-competition paper (Pang et al. 2025, V.A)."""

    family: Literal["pang_linear"]
    prefill: LinearStage
    decode: LinearRound
    kv: KvCache | None = None
    clients: Clients | None = None
    max_prefill_tokens: Tokens | None = None
    prefill_level_step: Tokens | None = None

    def time_coefficients(self) -> list[float]:
        return [self.prefill.overhead_ms, self.prefill.per_token_ms, self.decode.overhead_ms,
                self.decode.per_client_ms]

    def prefill_stage_ms(self, tokens: int) -> float:
        """Duration of a prefill stage that processes ``tokens`` prompt tokens (0 if empty)."""
        if tokens <= 0:
            return 0.0
        return self.prefill.overhead_ms + self.prefill.per_token_ms * tokens

    def decode_round_ms(self, clients: int) -> float:
        """Duration of one decode round in which ``clients`` clients each produce one token."""
        if clients <= 0:
            return 0.0
        return self.decode.overhead_ms + self.decode.per_client_ms * clients

    def iteration_ms(self, prefill_tokens: int, decodes: int, decode_kv: float, units: float,
                     chunks: int) -> float:
        """An iteration of the simulation: a prefill stage or a decode round (PD competition
        never mixes them)."""
        if prefill_tokens and decodes:
            raise ValueError("the stage model has no iteration mixing prefill and decode")
        if prefill_tokens:
            return self.prefill_stage_ms(prefill_tokens)
        return self.decode_round_ms(decodes)

    def decode_iteration_costs(self, decodes: int) -> tuple[float, float]:
        """A decode-only iteration of ``decodes`` requests costs per_batch + per_kv · KVs read:
        (per_batch, per_kv)."""
        return self.decode_round_ms(decodes), 0.0


def prefill_levels(profile: PangLinearProfile, max_tokens: int, step: int | None = None
                   ) -> list[tuple[int, float]]:
    """Prefill levels (N^cap_l, T^p_l) of the original MIP (eqs 5–7): level 0 with capacity 0 and
    time 0, then multiples of ``step`` up to ``max_tokens`` (the last level is ``max_tokens``)."""
    step = step or profile.prefill_level_step or max_tokens
    caps = [*list(range(step, max_tokens, step)), max_tokens]
    return [(0, 0.0)] + [(c, profile.prefill_stage_ms(c)) for c in caps]
