"""Plans of the PD-competition problem and their times under the two time models.

A *plan* says, bin by bin, which requests are prefilled in the bin's prefill stage and on which
client, and how many decode rounds follow. Every plan is measured on the *decode axis*: D counts
decode rounds since time 0, so a request prefilled in bin k starts decoding at D = B_k (the
rounds before bin k) and, decoding one token per round (greedily, the dominant choice), ends at
B_k + N^d_i; its client is free for a prefill from the first bin with B ≥ that end.

Time models
-----------
``stage`` (the original MIP, eqs 1–25): a prefill stage lasts the time of the smallest prefill
    level holding its tokens (eqs 5–7); a decode round lasts T_d = t_round(J) whatever the number
    of clients decoding (eq 8 with T_d the full-batch round time). Total = Σ_k T^p(k) + T_d·D_end.
``replay`` (the replay engine): a prefill stage lasts overhead + per_token·tokens and a decode
    round overhead + per_client·(clients decoding). Total = Σ_k (overhead_p + per_token·tokens_k)
    + overhead_d·D_end + per_client·Σ_i N^d_i (every output token is decoded in exactly one round,
    and every round up to D_end has a client decoding in a plan without idle gaps).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from llmopt.data.cost import PangLinearProfile, prefill_levels
from llmopt.data.instance import Instance
from llmopt.data.limits import resolve_limits
from llmopt.errors import InstanceError
from llmopt.problems.pang.bounds import largest_prefill_level
from llmopt.problems.pang.kv import ReservationLedger, footprint, reserved_peak
from llmopt.schedule import ITERATION_COLUMNS, Schedule

TIME_MODELS = ("stage", "replay")


@dataclass(frozen=True)
class PDProblem:
    """Data of the PD-competition problem (Pang et al. 2025, III.B–C, Table II)."""

    ids: tuple[str, ...]
    inp: np.ndarray          # N^p_i
    out: np.ndarray          # N^d_i
    clients: int             # J
    t_round: float           # T_d: decode-round time at the full batch J (ms)
    cap: int                 # N^cap_L: largest prefill level (tokens)
    levels: tuple[tuple[int, float], ...]  # (N^cap_l, T^p_l), level 0 = (0, 0)
    profile: PangLinearProfile
    kv_capacity: int | None = None      # M: KV tokens (None: unlimited)

    @classmethod
    def from_instance(cls, instance: Instance, level_step: int | None = None) -> PDProblem:
        profile = instance.profile
        if not isinstance(profile, PangLinearProfile):
            raise InstanceError("the PD-competition problem needs a pang_linear profile",
                                file=instance.label(), field="model", value=profile.name)
        if instance.system.instances != 1:
            raise InstanceError("the PD-competition problem models one model instance",
                                file=instance.label(), field="system.instances",
                                value=instance.system.instances)
        if (instance.arrival_ms > 0).any():
            raise InstanceError("the PD-competition problem is offline: every request must "
                                "arrive at time 0", file=instance.label(),
                                field="requests.arrival_ms")
        cap, _ = largest_prefill_level(instance)
        return cls(
            ids=tuple(instance.ids), inp=instance.input_tokens.copy(),
            out=instance.output_tokens.copy(), clients=instance.system.clients,
            t_round=round(profile.decode_round_ms(instance.system.clients), 9), cap=cap,
            levels=tuple(prefill_levels(profile, cap, level_step)), profile=profile,
            kv_capacity=resolve_limits(instance).kv_tokens,
        )

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def footprint(self) -> np.ndarray:
        """KV tokens each request reserves while in flight (``llmopt.problems.pang.kv``)."""
        return footprint(self.inp, self.out)

    def level_ms(self, tokens: int) -> float:
        """T^p of the smallest level holding ``tokens`` (eqs 5–7); 0 for an empty stage."""
        for cap, ms in self.levels:
            if tokens <= cap:
                return ms
        raise ValueError(f"{tokens} prompt tokens exceed the largest level {self.cap}")

    def stage_ms(self, tokens: int, model: str) -> float:
        if model == "stage":
            return self.level_ms(tokens)
        return self.profile.prefill_stage_ms(tokens)

    def round_weight_ms(self, model: str) -> float:
        """Cost of one unit of the decode axis (one round) in the objective."""
        return self.t_round if model == "stage" else self.profile.decode.overhead_ms

    def constant_ms(self, model: str) -> float:
        """Part of the replay-model total that no schedule changes: the per-client decode cost
        of every output token (the per-token prefill cost is in ``stage_ms``)."""
        if model == "stage":
            return 0.0
        return self.profile.decode.per_client_ms * float(self.out.sum())

    def objective_offset_ms(self, model: str) -> float:
        """What the compact models' objective (rounds and stage overheads only) leaves out."""
        if model == "stage":
            return 0.0
        return self.constant_ms(model) + self.profile.prefill.per_token_ms * float(self.inp.sum())


@dataclass
class Plan:
    """Bins in prefill order: ``bins[k]`` the requests prefilled in bin k, ``starts[k]`` = B_k
    the decode rounds before bin k, ``client[i]`` the client of request i."""

    bins: list[list[int]]
    starts: list[int]
    client: np.ndarray
    source: str = ""
    notes: list[str] = field(default_factory=list)

    def bin_of(self, n: int) -> np.ndarray:
        out = np.full(n, -1, dtype=np.int64)
        for k, members in enumerate(self.bins):
            out[members] = k
        return out

    def start_of(self, n: int) -> np.ndarray:
        return np.asarray(self.starts, dtype=np.int64)[self.bin_of(n)]

    def decode_end(self, problem: PDProblem) -> int:
        return int((self.start_of(problem.n) + problem.out).max())

    def total_ms(self, problem: PDProblem, model: str) -> float:
        """Total inference time of the plan under ``model`` (see the module docstring)."""
        prefill = sum(problem.stage_ms(int(problem.inp[b].sum()), model) for b in self.bins if b)
        return float(prefill + problem.round_weight_ms(model) * self.decode_end(problem)
                     + problem.constant_ms(model))

    def prefill_stages(self) -> int:
        return sum(1 for b in self.bins if b)

    def check(self, problem: PDProblem) -> list[str]:
        """Structural feasibility: every request in one bin, bins ordered, a client free when
        its next request starts, stage capacity, at most J decoding at once."""
        reasons = []
        n = problem.n
        bin_of = self.bin_of(n)
        if (bin_of < 0).any() or sum(len(b) for b in self.bins) != n:
            reasons.append("every request must be in exactly one bin")
            return reasons
        if any(b < a for a, b in zip(self.starts, self.starts[1:], strict=False)):
            reasons.append("bin starts must not decrease")
        for k, b in enumerate(self.bins):
            if int(problem.inp[b].sum()) > problem.cap:
                reasons.append(f"bin {k} holds more than {problem.cap} prompt tokens")
        start = self.start_of(n)
        end = start + problem.out
        for j in range(problem.clients):
            mine = np.flatnonzero(self.client == j)
            order = mine[np.lexsort((bin_of[mine], start[mine]))]
            if (start[order][1:] < end[order][:-1]).any():
                reasons.append(f"client {j} starts a request before its previous one ends")
                break
        if ((self.client < 0) | (self.client >= problem.clients)).any():
            reasons.append("client out of range")
        if problem.kv_capacity is not None:
            peak, at = reserved_peak(start, end, problem.footprint)
            if peak > problem.kv_capacity:
                reasons.append(f"requests in flight reserve {peak} KV tokens at decode position "
                               f"{int(at)}, more than the capacity {problem.kv_capacity}")
        return reasons

    def to_data(self, problem: PDProblem) -> dict[str, Any]:
        """The plan in a solution file: assignment, per-client order, and the stages."""
        ids = problem.ids
        bin_of = self.bin_of(problem.n)
        order: dict[int, list[str]] = {}
        for i in np.lexsort((np.arange(problem.n), bin_of)):
            order.setdefault(int(self.client[i]), []).append(ids[i])
        d_end = self.decode_end(problem)
        stages = []
        for k, members in enumerate(self.bins):
            nxt = self.starts[k + 1] if k + 1 < len(self.bins) else d_end
            stages.append({"requests": [ids[i] for i in members],
                           "decode_rounds": int(nxt - self.starts[k])})
        return {"assignment": {ids[i]: int(self.client[i]) for i in range(problem.n)},
                "order": {str(c): v for c, v in sorted(order.items())}, "stages": stages}


def earliest_plan(problem: PDProblem, bins: list[list[int]], client: np.ndarray | None = None,
                  source: str = "") -> Plan:
    """The plan that prefills ``bins`` in order, each as early on the decode axis as the
    clients and the KV memory allow. Without ``client``, requests take the free clients that
    freed first. Raises ValueError for a bin that alone exceeds the KV capacity."""
    n = problem.n
    bins = [list(b) for b in bins if b]
    free_at = np.zeros(problem.clients, dtype=np.int64)  # decode position the client is free
    assigned = np.full(n, -1, dtype=np.int64) if client is None else np.asarray(client).copy()
    memory = ReservationLedger(problem.kv_capacity)
    size = problem.footprint
    starts: list[int] = []
    position = 0
    for members in bins:
        if client is None:
            # the |members| clients that free first; the bin starts when the last of them frees
            chosen = np.argsort(free_at, kind="stable")[: len(members)]
            position = max(position, int(free_at[chosen].max()))
            for i, j in zip(members, chosen, strict=True):
                assigned[i] = j
        else:
            position = max(position, max(int(free_at[assigned[i]]) for i in members))
        position = memory.earliest_fit(position, int(size[members].sum()))
        starts.append(position)
        for i in members:
            end = position + int(problem.out[i])
            free_at[int(assigned[i])] = end
            memory.add(end, int(size[i]))
    return Plan(bins, starts, assigned, source)


def plan_from_schedule(problem: PDProblem, schedule: Schedule) -> Plan:
    """The plan a PD-competition replay followed: its prefill stages in time order, each at the
    number of decode rounds before it, on the clients it used."""
    index = {rid: k for k, rid in enumerate(problem.ids)}
    its = schedule.iterations.sort_values("start_ms", kind="stable")
    decode_before = np.cumsum((its["phase"] == "decode").to_numpy())
    pre = schedule.segments[schedule.segments["phase"] == "prefill"]
    stage_starts = its.loc[its["phase"] == "prefill", "start_ms"].to_numpy()
    rounds_at = decode_before[(its["phase"] == "prefill").to_numpy()]
    bins: list[list[int]] = [[] for _ in stage_starts]
    client = np.full(problem.n, -1, dtype=np.int64)
    k_of = np.searchsorted(stage_starts, pre["start_ms"].to_numpy() - 1e-6)
    for rid, c, k in zip(pre["request"], pre["client"], k_of, strict=True):
        bins[int(k)].append(index[rid])
        client[index[rid]] = int(c)
    return Plan(bins, [int(r) for r in rounds_at], client, f"replay {schedule.policy}")


def stage_schedule(problem: PDProblem, plan: Plan) -> Schedule:
    """The plan timed by the stage model (the original MIP's): segments, iterations with one
    row per decode round, and request times."""
    n, ids = problem.n, problem.ids
    start = plan.start_of(n)
    end = start + problem.out
    seg_rows: list[tuple] = []
    it_rows: list[tuple] = []
    t = 0.0
    kv = 0
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    d_end = plan.decode_end(problem)
    bounds = [*plan.starts[1:], d_end]
    bin_of = plan.bin_of(n)
    for k, members in enumerate(plan.bins):
        tokens = int(problem.inp[members].sum())
        dur = problem.level_ms(tokens)
        if members:
            for i in members:
                seg_rows.append((ids[i], int(plan.client[i]), 0, "prefill", t, t + dur,
                                 int(problem.inp[i])))
            kv += tokens
            in_flight = int(((bin_of <= k) & (end > plan.starts[k])).sum())
            it_rows.append((0, t, t + dur, "prefill", len(members), tokens, 0, kv, 0, in_flight))
            t += dur
        lo, hi = plan.starts[k], bounds[k]
        if hi <= lo:
            continue
        active = np.flatnonzero((start <= lo) & (end > lo))
        for r in range(lo, hi):
            live = active[(start[active] <= r) & (end[active] > r)]
            kv += len(live)
            it_rows.append((0, t, t + problem.t_round, "decode", len(live), 0, len(live), kv, 0,
                            len(live)))
            done = live[end[live] == r + 1]
            kv -= int((problem.inp[done] + problem.out[done]).sum())
            t += problem.t_round
        t0 = t - (hi - lo) * problem.t_round
        for i in active.tolist():
            a, b = max(start[i], lo), min(end[i], hi)
            if b > a:
                s = t0 + (a - lo) * problem.t_round
                seg_rows.append((ids[i], int(plan.client[i]), 0, "decode", s,
                                 s + (b - a) * problem.t_round, int(b - a)))
                if a == start[i]:
                    first[i] = s + problem.t_round
                if b == end[i]:
                    finish[i] = s + (b - a) * problem.t_round
    segments = pd.DataFrame(seg_rows, columns=["request", "client", "instance", "phase",
                                               "start_ms", "end_ms", "tokens"])
    iterations = pd.DataFrame(it_rows, columns=ITERATION_COLUMNS)
    requests = pd.DataFrame({"request": list(ids), "instance": 0, "client": plan.client,
                             "input_tokens": problem.inp, "output_tokens": problem.out,
                             "arrival_ms": 0.0, "first_token_ms": first, "finish_ms": finish,
                             "evictions": 0})
    return Schedule("pd-competition", segments.sort_values(["client", "start_ms"],
                                                           ignore_index=True),
                    iterations, requests, problem.clients)
