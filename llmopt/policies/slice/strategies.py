"""What a slice-level scheduler decides (Cheng et al. 2024, sections 4.4–4.6 and 5.1), as the
strategies the slice-level engine (:mod:`llmopt.sim.slices`) is given:

batchers (the pool's requests into padded static batches, each with its estimated serving time
T_serve(N, L_i, S), eq 1)
    ``dp``    Algorithm 1 / eq 10, with PM's size limit when the scheduler has a batch size;
    ``fcfs``  arrival order, a fixed size.
offloaders (the batches of a period onto the instances)
    ``max-min``      eq 11: longest estimate first, to the least-loaded instance, the load
                     decremented by the estimate when the instance finishes the batch;
    ``round-robin``  in the batcher's order, continuing the turn across periods.
intervals (from one period to the next)
    ``adaptive``  eq 12, T = max(λ·min_w T_load(w), Γ), from the loads after offloading;
    ``fixed``     Γ.
local batching (routed requests): dealt round-robin to the instances (arrivals and returns on
one turn); an idle instance takes the first ``batch_size`` of its queue (FCFS; fewer when the
queue is shorter), and drops its last members until the batch fits in memory (eqs 5–9 /
Algorithm 2 at S); a request that does not fit even alone is a user error.

The loads of the offloaders are a :class:`~llmopt.problems.scls.offload.MaxMinOffloader`'s,
which the adaptive interval reads; round-robin offloading keeps them too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from llmopt.data.cost.scls import SclsProfile
from llmopt.problems.scls.offload import MaxMinOffloader
from llmopt.problems.scls.partition import Pool, dp_batches, fcfs_batches


class DpBatcher:
    """Algorithm 1's DP (eq 10), at most ``max_size`` per batch when given."""

    def __init__(self, profile: SclsProfile, slice_length: int, max_size: int | None,
                 label: str) -> None:
        self.profile, self.s, self.max_size, self.label = profile, slice_length, max_size, label

    def batches(self, prompts: list[int], ids: list[str]) -> tuple[list[list[int]], list[float]]:
        pool = Pool.of(prompts, self.profile, self.s, ids, self.max_size, file=self.label)
        groups = dp_batches(pool)
        return groups, [pool.batch_ms(g) for g in groups]


class FcfsBatcher:
    """The pool in arrival order cut into batches of ``size``."""

    def __init__(self, profile: SclsProfile, slice_length: int, size: int, label: str) -> None:
        self.profile, self.s, self.size, self.label = profile, slice_length, size, label

    def batches(self, prompts: list[int], ids: list[str]) -> tuple[list[list[int]], list[float]]:
        pool = Pool.of(prompts, self.profile, self.s, ids, None, file=self.label)
        groups = fcfs_batches(pool, self.size)
        return groups, [pool.batch_ms(g) for g in groups]


class MaxMinOffloading:
    """Eq 11 with the load decrement of section 4.5."""

    def __init__(self, loads: MaxMinOffloader) -> None:
        self.loads = loads

    def offload(self, estimates: list[float]) -> tuple[list[int], list[int]]:
        targets = self.loads.offload(estimates)
        return targets, sorted(range(len(estimates)), key=lambda j: (-estimates[j], j))

    def served(self, worker: int, estimate: float) -> None:
        self.loads.served(worker, estimate)


class RoundRobinOffloading:
    """The batches in the batcher's order, one instance after another."""

    def __init__(self, loads: MaxMinOffloader, workers: int) -> None:
        self.loads, self.workers, self.turn = loads, workers, 0

    def offload(self, estimates: list[float]) -> tuple[list[int], list[int]]:
        targets = []
        for estimate in estimates:
            w = self.turn % self.workers
            self.turn += 1
            targets.append(w)
            self.loads.loads[w] += estimate
        return targets, list(range(len(estimates)))

    def served(self, worker: int, estimate: float) -> None:
        self.loads.served(worker, estimate)


class AdaptiveInterval:
    """Eq 12 from the offloader's loads."""

    def __init__(self, loads: MaxMinOffloader, lam: float, gamma_ms: float) -> None:
        self.loads, self.lam, self.gamma_ms = loads, lam, gamma_ms

    def next_ms(self) -> float:
        return self.loads.interval_ms(self.lam, self.gamma_ms)


class FixedInterval:
    def __init__(self, gamma_ms: float) -> None:
        self.gamma_ms = gamma_ms

    def next_ms(self) -> float:
        return self.gamma_ms


class RoundRobinFcfs:
    """Routed requests: dealt round-robin; an instance's batch is the head of its queue."""

    def __init__(self, profile: SclsProfile, slice_length: int, size: int, workers: int,
                 label: str) -> None:
        self.profile, self.s, self.size, self.label = profile, slice_length, size, label
        self.workers, self.turn = workers, 0

    def deal(self) -> int:
        w = self.turn % self.workers
        self.turn += 1
        return w

    def take(self, queue: deque[int], prompt_of: Callable[[int], int], ids: list[str]
             ) -> tuple[int, float]:
        size = min(self.size, len(queue))
        prompts = [prompt_of(queue[x]) for x in range(size)]
        while len(prompts) > 1 and self.profile.out_of_memory(len(prompts), max(prompts),
                                                               self.s):
            prompts.pop()
        longest = max(prompts)
        if len(prompts) == 1 and self.profile.out_of_memory(1, longest, self.s):
            # a re-sent request whose prompt grew beyond memory: the pool's user error
            Pool.of([longest], self.profile, self.s, [ids[queue[0]]], file=self.label)
        return len(prompts), self.profile.serve_ms(len(prompts), longest, self.s)


def check_each_fits(profile: SclsProfile, slice_length: int
                    ) -> Callable[[list[int], list[str], str], None]:
    """Refuse a request that does not fit in memory even alone with S tokens (eqs 5–9 /
    Algorithm 2), as the pool does."""

    def check(prompts: list[int], ids: list[str], label: str) -> None:
        Pool.of(prompts, profile, slice_length, ids, file=label)

    return check


__all__ = ["AdaptiveInterval", "DpBatcher", "FcfsBatcher", "FixedInterval", "MaxMinOffloading",
           "RoundRobinFcfs", "RoundRobinOffloading", "check_each_fits"]
