"""Slice-level scheduling (SCLS), Cheng et al. 2024, sections 4.2–4.3: the serving time and the
memory of one padded static batch served for a slice of S iterations.

A batch of N requests is padded to its batch input length L_i (its longest input) and served for
L_o iterations; in SCLS L_o is the slice length S (section 4.2, last paragraphs). Its serving time
is (eqs 1–4)::

    T_serve(N, L_i, L_o) = T_prefill(N, L_i) + Σ_{l=1..L_o} τ_decode(L_i + l, N)     (1), (2)
    T_prefill(N, L_i)    = p1·N·L_i + p2·N + p3·L_i + p4                             (3)
    τ_decode(l, N)       = d1·N·l + d2·N + d3·l + d4                                 (4)

and the sum of eq 2 has the closed form (d1·N + d3)·(L_o·L_i + L_o(L_o + 1)/2) + L_o·(d2·N + d4).
Eq 2 is used as printed: L_o decode iterations after the prefill.

Memory (section 4.3): the KV cache of the batch, pad tokens and the invalid tokens generated after
a request finished included, is M_kv = (L_i + L_o)·N·Δ (eq 5); it must fit in
M_ava = M_cap − M_model − M_engine (eq 6). Two rules decide whether a batch runs out of memory:

``zeta`` (eqs 7–9, huggingface-transformers)
    M_kv(N, L_i, S) ≤ ζ·M_ava, i.e. N ≤ N_max = ⌊ζ·M_ava / (Δ·(L_i + S))⌋ (eq 8 with eq 9's ζ;
    ζ = 1 is eq 7).
``deepspeed`` (Algorithm 2, deepspeed-inference)
    profiled rules: with L = L_i + S, the batch is out of memory when L exceeds a rule's
    ``above_tokens`` (the first that applies, largest first) and N exceeds its ``max_batch``.

Iteration-level replays (the ILS baseline of section 5.1, continuous batching with chunked
prefill: ``llmopt.policies.slice.ils``) time each iteration of the simulation core from the same
coefficients, by the per-request mapping of ``base.per_request_iteration_ms`` (as the
``bilinear`` family of Huang et al. does with its eqs 14–15):

- the prefill chunks of an iteration, N = ``chunks`` requests and P prompt tokens, last eq 3 at
  N and L_i = P/N (no padding: continuous batching pads nothing, so L_i is the mean chunk, and
  a batch of equal chunks is timed exactly as eq 3 times it): p1·P + p2·N + p3·P/N + p4;
- d decodes reading K cached KVs in all last eq 4 at N = d and l = (K + d)/d: the k-th decode of
  a request of L_i prompt tokens reads L_i + k − 1 KVs and eq 2 charges it τ_decode(L_i + k, N),
  so a static batch of equal requests is timed as eq 2 sums it; per_batch + per_kv·K with
  per_batch = d1·d + d2·d + d3 + d4, per_kv = d1 + d3/d (``decode_iteration_costs``);
- a mixed iteration (chunks and decodes together, which padded static batches never form) lasts
  the sum of the two: the model has no term for their overlap.

Token semantics as eq 2 counts them: L_o decode iterations after the prefill, so the first output
token comes from the first decode (the policies set ``first_token_from_prefill = False``) and a
request of O output tokens decodes O times. KV capacity in tokens: ``kv_capacity`` (eqs 5–6).

Times in ms, sizes in tokens, memory in GiB (2^30 bytes) and Δ in bytes per token.
"""

from __future__ import annotations

import math
import numbers
from typing import Annotated, Literal

from pydantic import Field, model_validator

from llmopt.data.cost.base import (
    BilinearTerms,
    Coefficient,
    CostProfile,
    _Strict,
    per_request_decode_costs,
    per_request_iteration_ms,
)
from llmopt.data.ranges import MAX_CLIENTS, MAX_TOKENS
from llmopt.errors import OptionError

GIB = 2**30
DEFAULT_SLICE_LENGTH = 128  # S of section 5.1
MEMORY_RULES = ("zeta", "deepspeed")
Gib = Annotated[float, Field(ge=0, le=1e6)]


def check_slice_length(slice_length: object, *, field: str = "slice_length") -> int:
    """S must be an integer ≥ 1 (a user error otherwise)."""
    if isinstance(slice_length, bool) or not isinstance(slice_length, numbers.Integral) \
            or slice_length < 1:
        raise OptionError("the slice length S must be an integer ≥ 1", field=field,
                          value=slice_length, has_value=True)
    return int(slice_length)


class SclsCoefficients(_Strict):
    """c1·N·L + c2·N + c3·L + c4 (eq 3 with p1..p4, eq 4 with d1..d4), in ms."""

    c1: Coefficient
    c2: Coefficient
    c3: Coefficient
    c4: Coefficient

    def __call__(self, batch: float, length: float) -> float:
        return self.c1 * batch * length + self.c2 * batch + self.c3 * length + self.c4

    def terms(self) -> BilinearTerms:
        """(c1, c2, c3, c4) for ``base.per_request_iteration_ms``."""
        return self.c1, self.c2, self.c3, self.c4


class DeepSpeedRule(_Strict):
    """One line of Algorithm 2: out of memory when L_i + S > ``above_tokens`` and
    N > ``max_batch``."""

    above_tokens: Annotated[int, Field(ge=0, le=MAX_TOKENS)]
    max_batch: Annotated[int, Field(ge=1, le=MAX_CLIENTS)]


# Algorithm 2 as printed (LLaMA2-13B, A100 80 GB, deepspeed-inference v0.13.3, L ≤ 2048)
ALGORITHM_2 = (DeepSpeedRule(above_tokens=1024, max_batch=12),
               DeepSpeedRule(above_tokens=512, max_batch=22),
               DeepSpeedRule(above_tokens=0, max_batch=28))


class SclsProfile(CostProfile):
    """Serving time (eqs 1–4) and memory (eqs 5–9, Algorithm 2) of SCLS's padded static batches."""

    family: Literal["scls"]
    prefill: SclsCoefficients            # p1..p4 of eq 3 (ms)
    decode: SclsCoefficients             # d1..d4 of eq 4 (ms per iteration)
    memory_rule: Literal["zeta", "deepspeed"] = "zeta"
    gpu_memory_gib: Gib                  # M_cap (eq 6)
    model_memory_gib: Gib                # M_model (eq 6)
    engine_memory_gib: Gib = 0.0         # M_engine (eq 6)
    kv_bytes_per_token: Annotated[float, Field(gt=0, le=1e12)]  # Δ (eq 5)
    zeta: Annotated[float, Field(gt=0, le=1)] = 1.0  # ζ (eq 9); 1 gives eq 7
    deepspeed_rules: tuple[DeepSpeedRule, ...] = ALGORITHM_2

    def time_coefficients(self) -> list[float]:
        return [self.prefill.c1, self.prefill.c2, self.prefill.c3, self.prefill.c4,
                self.decode.c1, self.decode.c2, self.decode.c3, self.decode.c4]

    @model_validator(mode="after")
    def _memory_left(self) -> SclsProfile:
        if self.available_gib() <= 0:
            raise ValueError(
                f"M_ava = gpu_memory_gib − model_memory_gib − engine_memory_gib = "
                f"{self.available_gib():g} GiB (eq 6): nothing left for the KV cache")
        if not self.deepspeed_rules:
            raise ValueError("deepspeed_rules: at least one rule is needed")
        return self

    # --- serving time, eqs 1–4 -------------------------------------------------------------
    def prefill_ms(self, batch: int, input_tokens: int) -> float:
        """Eq 3: T_prefill(N, L_i)."""
        return self.prefill(batch, input_tokens)

    def decode_iteration_ms(self, cached_tokens: int, batch: int) -> float:
        """Eq 4: τ_decode(l, N), one decode iteration with ``cached_tokens`` cached per request."""
        return self.decode(batch, cached_tokens)

    def decode_ms(self, batch: int, input_tokens: int, iterations: int) -> float:
        """Eq 2: Σ_{l=1..L_o} τ_decode(L_i + l, N), in closed form."""
        n = iterations
        lengths = n * input_tokens + n * (n + 1) / 2
        d = self.decode
        return (d.c1 * batch + d.c3) * lengths + n * (d.c2 * batch + d.c4)

    def serve_ms(self, batch: int, input_tokens: int, iterations: int) -> float:
        """Eq 1: T_serve(N, L_i, L_o) = T_prefill(N, L_i) + T_decode(N, L_i, L_o)."""
        return self.prefill_ms(batch, input_tokens) + self.decode_ms(batch, input_tokens,
                                                                     iterations)

    def serve_terms(self, iterations: int) -> tuple[float, float, float, float]:
        """(A, B, C, D) with T_serve(N, L, S) = A·N·L + B·N + C·L + D for S = ``iterations``
        (eqs 1–4 collected: bilinear in batch size and padded length)."""
        p, d, s = self.prefill, self.decode, iterations
        tri = s * (s + 1) / 2
        return (p.c1 + d.c1 * s, p.c2 + d.c1 * tri + d.c2 * s, p.c3 + d.c3 * s,
                p.c4 + d.c3 * tri + d.c4 * s)

    # --- iterations of the simulation core (continuous batching: ILS) -----------------------
    def iteration_ms(self, prefill_tokens: int, decodes: int, decode_kv: float, units: float,
                     chunks: int) -> float:
        """One iteration (see the module doc): eq 3 at N = ``chunks``, L_i = ``prefill_tokens``
        / N, plus eq 4 at N = ``decodes``, l = (``decode_kv`` + N) / N; ``units`` (Σ(c² + 2mc))
        is not read. 0 for an empty iteration."""
        return per_request_iteration_ms(self.prefill.terms(), self.decode.terms(),
                                        prefill_tokens, decodes, decode_kv, chunks)

    def decode_iteration_costs(self, decodes: int) -> tuple[float, float]:
        """A decode-only iteration of d = ``decodes`` requests reading K KVs lasts per_batch +
        per_kv·K (eq 4 at N = d, l = (K + d)/d): per_batch = d1·d + d2·d + d3 + d4,
        per_kv = d1 + d3/d."""
        return per_request_decode_costs(self.decode.terms(), decodes)

    @property
    def kv_capacity(self) -> int:
        """KV tokens one instance holds in continuous batching: ⌊M_ava / Δ⌋ (eq 7 with eq 5
        counting each request's own tokens, eq 6's M_ava in bytes). Continuous batching pads
        nothing and drops a request's KVs when it finishes, so no pad or invalid tokens are held.
        ζ (eq 9) is not applied: it is huggingface-transformers' allowance for the fragmentation
        of the padded KV tensors that static batches allocate and grow per batch, while an
        iteration-level engine (the paper's ILS is DeepSpeed-FastGen) allocates its KV cache once
        in fixed blocks. The paper's "conservative memory management" of ILS is a limit on the
        requests running at once, ``system.clients`` here, not on the KV cache.
        ``system.kv_capacity`` overrides it (``llmopt.data.limits``)."""
        return math.floor(self.available_gib() * GIB / self.kv_bytes_per_token)

    # --- memory, eqs 5–9 and Algorithm 2 ---------------------------------------------------
    def available_gib(self) -> float:
        """Eq 6: M_ava = M_cap − M_model − M_engine (GiB)."""
        return self.gpu_memory_gib - self.model_memory_gib - self.engine_memory_gib

    def kv_bytes(self, batch: int, input_tokens: int, iterations: int) -> float:
        """Eq 5: M_kv(N, L_i, L_o) = (L_i + L_o)·N·Δ, pad and invalid tokens included."""
        return (input_tokens + iterations) * batch * self.kv_bytes_per_token

    def max_batch(self, input_tokens: int, slice_length: int) -> int:
        """The largest batch size that does not run out of memory at batch input length
        ``input_tokens`` and slice length S: eq 8 with eq 9's ζ (rule ``zeta``), or the first
        rule of Algorithm 2 that applies (rule ``deepspeed``); 0 when not even one request fits."""
        total = input_tokens + slice_length
        if self.memory_rule == "deepspeed":
            for rule in sorted(self.deepspeed_rules, key=lambda r: -r.above_tokens):
                if total > rule.above_tokens:
                    return rule.max_batch
            return 0  # below every rule's threshold only when no rule starts at 0: no profile
        usable = self.zeta * self.available_gib() * GIB
        return math.floor(usable / (self.kv_bytes_per_token * total))

    def out_of_memory(self, batch: int, input_tokens: int, slice_length: int) -> bool:
        """OOM(N, L_i, S) of Algorithm 1 (line 10): eq 9 violated, or Algorithm 2 true."""
        return batch > self.max_batch(input_tokens, slice_length)


__all__ = ["ALGORITHM_2", "MEMORY_RULES", "DeepSpeedRule", "SclsCoefficients", "SclsProfile"]
