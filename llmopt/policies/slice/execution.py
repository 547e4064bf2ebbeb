"""One slice of a padded static batch (Cheng et al. 2024, sections 2.4 and 4.2–4.3).

A batch pads every request to its longest current prompt L_i (the input plus what it generated in
earlier slices: a re-batched request prefills those again, its KVs recomputed), then runs decode
iterations until S have run or every request has finished (the early return of section 4.2),
whichever is first: L_o = min(S, max_r remaining_r) iterations. Every request takes part in every
iteration, so a request that finishes early keeps generating *invalid* tokens until the batch
ends (section 2.4). Finished requests are returned; the others go back to the pool with their
generated tokens. The batch takes T_serve(N, L_i, L_o) (eqs 1–4) and holds
M_kv(N, L_i, L_o) = (L_i + L_o)·N·Δ (eq 5), pad and invalid tokens included.

The function lives with the cluster simulation that uses it (:mod:`llmopt.sim.slices`, which may
not import this package); this module keeps its name for the policies.
"""

from __future__ import annotations

from llmopt.sim.slices import SliceOutcome, serve_slice

__all__ = ["SliceOutcome", "serve_slice"]
