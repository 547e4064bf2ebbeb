"""The InferMax state per request and batch in CP-SAT (Kim et al. 2025, section 5), shared by
the CSP (``csp.build_cpsat``, minimum makespan) and the attainment model
(``attainment_model.build_model``, most requests meeting their SLOs).

Requests i with input I_i and output O_i; batches j = 1..N, j = 0 the initial state (S_i0 = I_i,
m_i0 = 0, nothing generated, not done). A request holds at most K_i = I_i + O_i − 1 KVs. Per
request and batch (``Cell``):

- S_ij, prompt and generated tokens after batch j; g_ij, a token is generated in batch j;
  non-decreasing sequence length: S_ij = S_i,j−1 + g_ij;
- done_ij once S_ij = I_i + O_i (the paper's termination Σ_j g_ij = O_i is the caller's: the
  CSP requires done_iN, the attainment model only the SLO obligations it counts); has1_ij once
  S_ij ≥ I_i + 1, the first token (both monotone in j, done implies has1);
- before_ij, the KVs cached going into batch j, and rem_ij = S_i,j−1 − before_ij ≥ 1 the tokens
  not cached;
- tokens to process (eq 2): c_ij ≤ rem_ij, and c_ij = 0 once done;
- token generation (eq 3): g_ij = 1 exactly when c_ij = rem_ij;
- memory management (eq 1): occ_ij, the KVs held during batch j, = before_ij + c_ij (0 if
  evicted at batch j, below), and m_ij = occ_ij, or 0 once done (a finishing request holds its
  KVs in its last batch); an eviction needs KVs to free (m_i,j−1 ≥ 1);
- phases (the paper omits them): pos_ij when c_ij ≥ 1; dec_ij, a decode, when the one uncached
  token of a request that already has its first token is processed (pos, rem = 1, has1_i,j−1);
  every other chunk is a prefill or refill chunk; kvr_ij, the KVs a decode reads (before_ij
  when dec_ij, else 0), the batch's decode_kv cost term (section 3.2).

Batch constraints (eq 4: Σ_i c_ij ≤ C, Σ_i occ_ij ≤ M), the batch times, arrivals, the
objective and the redundant constraints are the callers'.

Eviction (``Eviction``), the one difference in the state itself:

- ``AT_BATCH`` (the CSP): eq 1 and 2 as printed. e_ij evicts at batch j: c_ij = 0 and
  occ_ij = 0, and before_ij is m_i,j−1 (the variable itself). The CSP is the paper's model; its
  plan still replays (an eviction at batch j is the replay's eviction before batch j of a
  request that batch j does not process), but a request evicted at batch j restarts at j + 1
  at the earliest.
- ``BEFORE_BATCH`` (the attainment model): e_ij frees the KVs before batch j (before_ij = 0) and
  the request may process tokens in that same batch, as the replay of a plan does
  (``llmopt.sim.replica``); the attainment model's plans are replayed and counted, so its
  batches must mean what the replay does. No e_i1 (nothing is cached before batch 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    from ortools.sat.python.cp_model import CpModel, IntVar


class Eviction(Enum):
    """When an eviction e_ij frees the KVs of request i (see the module doc)."""

    AT_BATCH = "at_batch"          # eq 1–2 as printed: in batch j, which processes nothing of i
    BEFORE_BATCH = "before_batch"  # the replay: before batch j, which may process i again


@dataclass(frozen=True)
class Cell:
    """The state variables of one request i in one batch j ≥ 1 (the module doc's names)."""

    S: IntVar
    m: IntVar
    c: IntVar
    g: IntVar
    e: IntVar | None       # None: BEFORE_BATCH at batch 1
    done: IntVar
    has1: IntVar
    before: IntVar         # KVs cached going into batch j
    rem: IntVar            # S_i,j−1 − before: the tokens not cached
    occ: IntVar            # KVs held during batch j
    pos: IntVar            # c ≥ 1
    dec: IntVar            # a decode
    kvr: IntVar            # KVs a decode reads (before when dec, else 0)


@dataclass(frozen=True)
class State:
    """Grids [request][batch] of the state (batch 0: constants S = I, m = 0, has1 = done = 0;
    the other grids hold None at batch 0), and the cells for batches 1..N."""

    S: list[list[Any]]
    m: list[list[Any]]
    c: list[list[Any]]
    e: list[list[Any]]
    dec: list[list[Any]]
    has1: list[list[Any]]
    done: list[list[Any]]
    cells: list[list[Cell]]   # cells[i][j − 1] is batch j

    def batch(self, j: int) -> list[Cell]:
        """The cells of batch j (1..N), one per request."""
        return [row[j - 1] for row in self.cells]


def build_state(md: CpModel, I: Sequence[int] | np.ndarray, O: Sequence[int] | np.ndarray, C: int,
                N: int, eviction: Eviction) -> State:
    """Add the state of the module doc for requests with inputs ``I`` and outputs ``O``, token
    budget ``C`` and ``N`` batches to ``md``."""
    n = len(I)

    def grid() -> list[list[Any]]:
        return [[None] * (N + 1) for _ in range(n)]

    S, m, c, e, dec, has1, done = grid(), grid(), grid(), grid(), grid(), grid(), grid()
    cells: list[list[Cell]] = [[] for _ in range(n)]
    for i in range(n):
        Ii, Oi = int(I[i]), int(O[i])
        Ki = Ii + Oi - 1
        S[i][0] = md.new_constant(Ii)
        m[i][0] = md.new_constant(0)
        has1[i][0] = md.new_constant(0)
        done[i][0] = md.new_constant(0)
        for j in range(1, N + 1):
            S[i][j] = md.new_int_var(Ii, Ii + Oi, f"S{i}_{j}")
            m[i][j] = md.new_int_var(0, Ki, f"m{i}_{j}")
            c[i][j] = md.new_int_var(0, min(C, Ki), f"c{i}_{j}")
            g = md.new_bool_var(f"g{i}_{j}")
            done[i][j] = md.new_bool_var(f"done{i}_{j}")
            has1[i][j] = md.new_bool_var(f"h{i}_{j}")
            md.add(S[i][j] == Ii + Oi).only_enforce_if(done[i][j])
            md.add(S[i][j] <= Ii + Oi - 1).only_enforce_if(done[i][j].negated())
            md.add(S[i][j] >= Ii + 1).only_enforce_if(has1[i][j])
            md.add(S[i][j] == Ii).only_enforce_if(has1[i][j].negated())
            md.add_implication(has1[i][j - 1], has1[i][j])
            md.add_implication(done[i][j - 1], done[i][j])
            md.add_implication(done[i][j], has1[i][j])
            # (1) eviction: frees the KVs of a running request
            before: Any
            if eviction is Eviction.AT_BATCH:
                e[i][j] = md.new_bool_var(f"e{i}_{j}")
                md.add(m[i][j - 1] >= 1).only_enforce_if(e[i][j])
                md.add(c[i][j] == 0).only_enforce_if(e[i][j])             # (2) as printed
                before = m[i][j - 1]
            elif j >= 2:
                e[i][j] = md.new_bool_var(f"e{i}_{j}")
                before = md.new_int_var(0, Ki, f"b{i}_{j}")
                md.add(before == m[i][j - 1]).only_enforce_if(e[i][j].negated())
                md.add(before == 0).only_enforce_if(e[i][j])
                md.add(m[i][j - 1] >= 1).only_enforce_if(e[i][j])
            else:
                before = m[i][0]
            rem = md.new_int_var(1, Ii + Oi, f"rem{i}_{j}")
            md.add(rem == S[i][j - 1] - before)
            # (2) tokens to process; nothing once done
            md.add(c[i][j] <= rem)
            md.add(c[i][j] == 0).only_enforce_if(done[i][j - 1])
            # (3) a token is generated exactly when everything uncached is processed
            md.add(c[i][j] == rem).only_enforce_if(g)
            md.add(c[i][j] <= rem - 1).only_enforce_if(g.negated())
            md.add(S[i][j] == S[i][j - 1] + g)                          # sequence length
            # (1) memory: the KVs held during the batch, kept after it until done
            occ = md.new_int_var(0, Ki, f"occ{i}_{j}")
            if eviction is Eviction.AT_BATCH:
                md.add(occ == before + c[i][j]).only_enforce_if(e[i][j].negated())
                md.add(occ == 0).only_enforce_if(e[i][j])
            else:
                md.add(occ == before + c[i][j])
            md.add(m[i][j] == occ).only_enforce_if(done[i][j].negated())
            md.add(m[i][j] == 0).only_enforce_if(done[i][j])
            # phases: a decode is the one uncached token after the first generated one
            pos = md.new_bool_var(f"pos{i}_{j}")
            md.add(c[i][j] >= 1).only_enforce_if(pos)
            md.add(c[i][j] == 0).only_enforce_if(pos.negated())
            one = md.new_bool_var(f"rem1{i}_{j}")
            md.add(rem == 1).only_enforce_if(one)
            md.add(rem >= 2).only_enforce_if(one.negated())
            d = md.new_bool_var(f"dec{i}_{j}")
            md.add_bool_and([pos, one, has1[i][j - 1]]).only_enforce_if(d)
            md.add_bool_or([pos.negated(), one.negated(), has1[i][j - 1].negated()]
                           ).only_enforce_if(d.negated())
            dec[i][j] = d
            kvr = md.new_int_var(0, Ki, f"kvr{i}_{j}")
            md.add(kvr == before).only_enforce_if(d)
            md.add(kvr == 0).only_enforce_if(d.negated())
            cells[i].append(Cell(S[i][j], m[i][j], c[i][j], g, e[i][j], done[i][j],
                                 has1[i][j], before, rem, occ, pos, d, kvr))
    return State(S, m, c, e, dec, has1, done, cells)
