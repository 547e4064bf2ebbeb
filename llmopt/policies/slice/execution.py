"""One slice of a padded static batch (Cheng et al. 2024, sections 2.4 and 4.2–4.3).

A batch pads every request to its longest current prompt L_i (the input plus what it generated in
earlier slices: a re-batched request prefills those again, its KVs recomputed), then runs decode
iterations until S have run or every request has finished (the early return of section 4.2),
whichever is first: L_o = min(S, max_r remaining_r) iterations. Every request takes part in every
iteration, so a request that finishes early keeps generating *invalid* tokens until the batch
ends (section 2.4). Finished requests are returned; the others go back to the pool with their
generated tokens. The batch takes T_serve(N, L_i, L_o) (eqs 1–4) and holds
M_kv(N, L_i, L_o) = (L_i + L_o)·N·Δ (eq 5), pad and invalid tokens included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmopt.data.cost.scls import SclsProfile
from llmopt.errors import InternalError
from llmopt.problems.scls.partition import check_slice_length


@dataclass(frozen=True)
class SliceOutcome:
    """What one slice did: per request (in the order given) the tokens generated, whether it
    finished, its pad tokens and its invalid tokens; and the batch's iterations, time (ms) and
    KV bytes."""

    padded_length: int
    iterations: int
    early_return: bool
    serve_ms: float
    kv_bytes: float
    generated: list[int]
    finished: list[bool]
    pad_tokens: list[int]
    invalid_tokens: list[int]


def serve_slice(profile: SclsProfile, prompt_tokens: Sequence[int], remaining: Sequence[int],
                slice_length: int) -> SliceOutcome:
    """Serve one padded static batch for a slice: ``prompt_tokens`` are the requests' current
    prompts (input + tokens generated so far), ``remaining`` the output tokens each still has to
    generate (≥ 1)."""
    s = check_slice_length(slice_length)
    if not prompt_tokens or len(prompt_tokens) != len(remaining) or min(remaining) < 1:
        raise InternalError("a slice needs one or more requests, each with output left")
    n = len(prompt_tokens)
    length = max(prompt_tokens)
    iterations = min(s, max(remaining))
    generated = [min(r, iterations) for r in remaining]
    return SliceOutcome(
        padded_length=length, iterations=iterations, early_return=iterations < s,
        serve_ms=profile.serve_ms(n, length, iterations),
        kv_bytes=profile.kv_bytes(n, length, iterations),
        generated=generated, finished=[r <= iterations for r in remaining],
        pad_tokens=[length - p for p in prompt_tokens],
        invalid_tokens=[iterations - g for g in generated])


__all__ = ["SliceOutcome", "serve_slice"]
