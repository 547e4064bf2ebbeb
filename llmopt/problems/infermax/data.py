"""The data of the InferMax CSP (Kim et al. 2025, section 5) and the plans and trajectories
its models, the MIP form and the replay share: ``CSPData`` (requests, M, C, P, the cost model
in integer units, the floors on the number of batches), batch plans from schedules and from
model values, and the state trajectories a plan implies."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np

from llmopt.data.cost import InferMaxProfile
from llmopt.data.instance import Instance
from llmopt.errors import InstanceError

COEFFICIENTS = ("bias_ms", "per_token_ms", "decode_kv_ms", "prefill_attention_ms",
                "per_prefill_request_ms")


@dataclass(frozen=True)
class CSPData:
    ids: tuple[str, ...]
    I: np.ndarray
    O: np.ndarray
    T: np.ndarray          # arrivals, ms
    M: int
    C: int
    P: int
    profile: InferMaxProfile
    scale: int             # integer time units per ms
    exact: bool

    @classmethod
    def from_instance(cls, instance: Instance) -> CSPData:
        profile = instance.profile
        if not isinstance(profile, InferMaxProfile):
            raise InstanceError("the InferMax CSP needs an infermax profile",
                                file=instance.label(), field="model", value=profile.name)
        M = instance.system.kv_capacity or profile.kv_capacity
        C = instance.system.max_batch_tokens or profile.max_batch_tokens
        if M is None or C is None:
            raise InstanceError("the CSP needs M and C", file=instance.label(),
                                field="system.kv_capacity" if M is None
                                else "system.max_batch_tokens")
        if instance.system.clients < instance.num_requests:
            raise InstanceError("the CSP has no limit on running requests: give at least as "
                                "many clients as requests", file=instance.label(),
                                field="system.clients", value=instance.system.clients)
        values = [getattr(profile, k) for k in COEFFICIENTS]
        scale, exact = 10 ** 12, False
        for k in range(13):
            if all(abs(v * 10 ** k - round(v * 10 ** k)) < 1e-6 for v in values):
                scale, exact = 10 ** k, True
                break
        P = min(instance.system.max_prefill_tokens or C, C)
        return cls(tuple(instance.ids), instance.input_tokens.copy(),
                   instance.output_tokens.copy(), instance.arrival_ms.copy(), int(M), int(C),
                   int(P), profile, scale, exact)

    @property
    def n(self) -> int:
        return len(self.ids)

    def coef(self, name: str) -> int:
        return round(getattr(self.profile, name) * self.scale)

    def arrival_units(self, i: int) -> int:
        """Request i's arrival in time units, read as written (4.086 ms is 4086 units at 1000
        per ms; in floats 4.086 · 1000 is 4086.0000000000005) and rounded down: exact when its
        decimals fit the scale, else earlier, which only relaxes the model."""
        return math.floor(Fraction(Decimal(repr(float(self.T[i])))) * self.scale)

    def generation_weight_cap(self) -> int:
        """The most a batch can score when each request generating its first token scores 1
        and each generating a later token scores 2.

        A request generating a token holds its S_{j−1} KVs in that batch: at least I_i for the
        first token and I_i + 1 for a later one; the batch holds at most M (constraint 4). The
        cap is a small knapsack over requests (for each reachable score, the fewest KVs).
        Summed over batches, the scores are Σ_i (2·O_i − 1), so this caps the throughput of
        generation that the LP relaxation sees: a redundant cut, exact for integer solutions.
        """
        fewest = {0: 0}
        for i in range(self.n):
            step = dict(fewest)
            options = [(1, int(self.I[i]))] + ([(2, int(self.I[i]) + 1)] if self.O[i] > 1 else [])
            for score, kvs in fewest.items():
                for add, held in options:
                    if kvs + held <= self.M and kvs + held < step.get(score + add, self.M + 1):
                        step[score + add] = kvs + held
            fewest = step
        return max(fewest)

    def batches_for_generation(self) -> int:
        """Non-empty batches any schedule needs, from the scores of ``generation_weight_cap``
        (Σ_i (2·O_i − 1) in all, at most the cap per batch)."""
        return math.ceil(int((2 * self.O - 1).sum()) / self.generation_weight_cap())

    def batches_for_memory(self) -> int:
        """Non-empty batches any schedule needs, from memory: generating its t-th token, a
        request holds at least I + t − 1 KVs, and a batch holds at most M."""
        held = int((self.O * self.I + self.O * (self.O - 1) // 2).sum())
        return math.ceil(held / self.M)

    def generation_cap_applies(self) -> bool:
        """Whether the models add the generation cap: where its floor on the number of
        batches beats the one from memory (elsewhere it only adds rows)."""
        return self.batches_for_generation() > self.batches_for_memory()

    def interchangeable_groups(self) -> list[list[int]]:
        """Requests with the same I, O and arrival: renumbering them within a group maps
        schedules onto schedules, so the models may order them (a symmetry break)."""
        groups: dict[tuple, list[int]] = {}
        for i in range(self.n):
            groups.setdefault((int(self.I[i]), int(self.O[i]), float(self.T[i])), []).append(i)
        return list(groups.values())

    def interchangeable_pairs(self) -> list[tuple[int, int]]:
        """Consecutive members (a, b) of each interchangeable group."""
        return [pair for members in self.interchangeable_groups()
                for pair in itertools.pairwise(members)]


# --------------------------------------------------------------------- plans and trajectories

def batches_from_schedule(ids: tuple[str, ...], schedule) -> list[dict[str, Any]]:
    """The batch plan a continuous-batching schedule followed: per iteration, the requests
    evicted before it, its chunks and its decodes."""
    its = schedule.iterations.sort_values("start_ms", kind="stable").reset_index(drop=True)
    S = its["start_ms"].to_numpy()
    E = its["end_ms"].to_numpy()
    plan: list[dict[str, Any]] = [{"evict": [], "prefill": {}, "decode": []} for _ in range(len(S))]
    for row in schedule.segments.itertuples(index=False):
        a = int(np.searchsorted(S, row.start_ms - 1e-6, side="left"))
        b = int(np.searchsorted(E, row.end_ms + 1e-6, side="right")) - 1
        if row.phase == "evict":
            plan[a]["evict"].append(row.request)
        elif row.phase == "decode":
            for j in range(a, b + 1):
                plan[j]["decode"].append(row.request)
        else:
            plan[a]["prefill"][row.request] = int(row.tokens)
    return plan


def trajectories(data: CSPData, plan: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """S, m, c, g, e per request and batch (shape n × (N+1), column 0 the initial state)."""
    index = {rid: k for k, rid in enumerate(data.ids)}
    N = len(plan)
    S = np.zeros((data.n, N + 1), dtype=np.int64)
    m = np.zeros_like(S)
    c = np.zeros_like(S)
    g = np.zeros_like(S)
    e = np.zeros_like(S)
    S[:, 0] = data.I
    for j, batch in enumerate(plan, start=1):
        S[:, j], m[:, j] = S[:, j - 1], m[:, j - 1]
        for r in batch["evict"]:
            e[index[r], j] = 1
            m[index[r], j] = 0
        for r, tokens in batch["prefill"].items():
            c[index[r], j] = tokens
        for r in batch["decode"]:
            c[index[r], j] = 1
        full = (c[:, j] > 0) & (c[:, j] == S[:, j - 1] - m[:, j - 1])
        g[:, j] = full
        m[:, j] = np.where(e[:, j] == 1, 0, m[:, j - 1] + c[:, j])
        S[:, j] = S[:, j - 1] + g[:, j]
        done = S[:, j] == data.I + data.O
        m[:, j] = np.where(done, 0, m[:, j])
    return {"S": S, "m": m, "c": c, "g": g, "e": e}


def plan_from_values(data: CSPData, c: np.ndarray, e: np.ndarray,
                     decode: np.ndarray) -> list[dict[str, Any]]:
    """The batch plan of a solver's c, e and decode indicators (n × N arrays)."""
    plan = []
    for j in range(c.shape[1]):
        batch = {"evict": [data.ids[i] for i in np.flatnonzero(e[:, j])],
                 "prefill": {data.ids[i]: int(c[i, j]) for i in np.flatnonzero(c[:, j])
                             if not decode[i, j]},
                 "decode": [data.ids[i] for i in np.flatnonzero(decode[:, j])]}
        if batch["evict"] or batch["prefill"] or batch["decode"]:
            plan.append(batch)
    return plan


# --------------------------------------------------------------------- CP-SAT model
