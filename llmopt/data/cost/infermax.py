"""Kim et al. 2025 (InferMax), section 3.2: a batch's time is linear in the tokens processed and
the KVs read by decodes, plus prefill attention in Σ(c² + 2mc) and a term per prefill request."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from llmopt.data.cost.base import CostProfile, NonNegFloat, Tokens


class InferMaxProfile(CostProfile):
    """Batch-time model of InferMax (Kim et al. 2025, section 3.2).

    T(B) = bias + per_token · Σ c  (non-attention: tokens processed, 1 per decode request)
           + decode_kv · Σ_decode m  (decode attention: KVs read)
           + prefill_attention · Σ_prefill (c² + 2mc)  (prefill/refill chunks of c tokens
             after m already in the cache)
           + per_prefill_request · (prefill/refill requests in the batch)
    for a non-empty batch; 0 for an empty one.
    """

    family: Literal["infermax"]
    bias_ms: NonNegFloat
    per_token_ms: NonNegFloat
    decode_kv_ms: NonNegFloat
    prefill_attention_ms: NonNegFloat
    per_prefill_request_ms: NonNegFloat
    kv_capacity: Tokens | None = None
    max_batch_tokens: Tokens | None = None
    derivation: str | None = None

    def time_coefficients(self) -> list[float]:
        return [self.bias_ms, self.per_token_ms, self.decode_kv_ms, self.prefill_attention_ms,
                self.per_prefill_request_ms]

    def batch_ms(self, tokens: float, decode_kv: float, prefill_units: float,
                 prefill_requests: int) -> float:
        """Time of one batch from its aggregates (see the class docstring)."""
        if tokens <= 0:
            return 0.0
        return (self.bias_ms + self.per_token_ms * tokens + self.decode_kv_ms * decode_kv
                + self.prefill_attention_ms * prefill_units
                + self.per_prefill_request_ms * prefill_requests)

    def iteration_ms(self, prefill_tokens: int, decodes: int, decode_kv: float, units: float,
                     chunks: int) -> float:
        """An iteration of the simulation: ``batch_ms`` of its aggregates, written out (the
        simulation calls it once per batch)."""
        tokens = prefill_tokens + decodes
        if tokens <= 0:
            return 0.0
        return (self.bias_ms + self.per_token_ms * tokens + self.decode_kv_ms * decode_kv
                + self.prefill_attention_ms * units + self.per_prefill_request_ms * chunks)

    def chunked_prefill_ms(self, prompt_tokens: Sequence[float], chunk: int) -> list[float]:
        """Each prompt prefilled alone in chunks of ``chunk`` tokens, one per iteration (the
        chunks' Σ(c² + 2mc) is I²): ⌈I/chunk⌉·(bias + per_prefill_request) + per_token·I +
        prefill_attention·I²."""
        fixed = self.bias_ms + self.per_prefill_request_ms
        return [math.ceil(i / chunk) * fixed + self.per_token_ms * i
                + self.prefill_attention_ms * i * i for i in prompt_tokens]

    def decode_iteration_costs(self, decodes: int) -> tuple[float, float]:
        """A decode-only iteration of ``decodes`` requests costs per_batch + per_kv · KVs read:
        (per_batch, per_kv), summed in ``batch_ms``'s order."""
        return self.bias_ms + self.per_token_ms * decodes, self.decode_kv_ms
