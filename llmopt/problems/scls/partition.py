"""Serving-time-oriented batching of SCLS (Cheng et al. 2024, section 4.4): partition a pool of
requests into padded static batches of least total serving time, none out of memory.

A batch B served for a slice of S iterations costs T_serve(|B|, max_{r∈B} L_r, S) (eqs 1–4 of
:mod:`llmopt.data.cost.scls`), and may not run out of memory: |B| ≤ N_max(max L, S) (eq 8 with
eq 9's ζ, or Algorithm 2). Three solvers:

``dp``     Algorithm 1 as printed: sort by input length, then the dynamic program of eq 10,
           T[i] = min_{0<j≤i} T[j−1] + T_serve(i−j+1, L_i, S), over *contiguous* groups of the
           sorted pool, stopping at the first group that is out of memory (line 10).
``cpsat``  an exact set-partition model over *all* partitions: by counts per padded length
           with Hall's condition (:func:`counts_model`, the default) or with requests assigned
           to padded lengths (:func:`assignment_model`, weaker: for comparison).
``brute``  every set partition of the pool (at most :data:`BRUTE_MAX` requests).

Does contiguity lose optimality? Not when T_serve is non-decreasing in the padded length for every
batch size and OOM is monotone (more requests or a longer padded length never fit better). Proof:
number the requests in sorted order and take any partition; order its batches by their longest
member (index) l_1 < l_2 < … and let s_k be the sizes' prefix sums. Batches 1..k hold s_k requests,
all of index ≤ l_k, so s_k ≤ l_k. The contiguous partition with the same sizes in the same order
has batch k = positions s_{k−1}+1..s_k, whose longest member s_k is no longer than l_k: the same
sizes, no longer padded lengths, hence no more time and no memory violation. The DP is exact over
contiguous partitions, so it is exact. With T_serve = A·N·L + B·N + C·L + D (eqs 1–4 collected,
:meth:`SclsProfile.serve_terms`) the first condition is A·N + C ≥ 0 for N = 1 and N = N_max;
:func:`dp_is_exact` checks both conditions for an instance, and ``dp`` reports ``optimal`` only
then (the proof is the certificate); otherwise the DP is a heuristic and ``feasible``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from llmopt.backends import cpsat as cpsat_backend
from llmopt.data.cost.scls import (
    DEFAULT_SLICE_LENGTH,
    GIB,
    SclsProfile,
    check_slice_length,
)
from llmopt.data.instance import Instance
from llmopt.errors import InstanceError, InternalError, OptionError, ProfileError
from llmopt.problems.outcome import Verdict, decide, keep_better, proof_text
from llmopt.progress import SILENT, Progress
from llmopt.result import Result
from llmopt.version import __version__

SOLVERS = ("dp", "cpsat", "brute")
BRUTE_MAX = 9               # Bell(9) = 21,147 partitions
NS_PER_MS = 1_000_000       # CP-SAT costs are integers: ms rounded to the nanosecond
OPTIMAL_RTOL = 1e-6         # objective and bound equal within 1 ppm (or the rounding slack)


@dataclass(frozen=True)
class Pool:
    """The requests to batch: ids and input lengths (tokens), the profile and S."""

    ids: tuple[str, ...]
    lengths: np.ndarray
    profile: SclsProfile
    slice_length: int
    max_size: int | None = None  # a batch-size limit of the scheduler (PM's 12/16), if any

    @classmethod
    def from_instance(cls, instance: Instance, slice_length: int = DEFAULT_SLICE_LENGTH,
                      max_size: int | None = None) -> Pool:
        profile = instance.profile
        if not isinstance(profile, SclsProfile):
            raise ProfileError("slice-level batching needs an scls profile (eqs 1–9)",
                               file=instance.label(), field="model", value=profile.name)
        pool = cls.of(instance.input_tokens.tolist(), profile, slice_length, instance.ids,
                      max_size, file=instance.label())
        return pool

    @classmethod
    def of(cls, lengths: Sequence[int], profile: SclsProfile, slice_length: int,
           ids: Sequence[str] | None = None, max_size: int | None = None, *,
           file: str | None = None) -> Pool:
        ids = tuple(ids) if ids is not None else tuple(f"r{i}" for i in range(len(lengths)))
        if max_size is not None and (isinstance(max_size, bool) or max_size < 1):
            raise OptionError("the batch-size limit must be an integer ≥ 1", field="max_size",
                              value=max_size)
        pool = cls(ids, np.asarray(lengths, dtype=np.int64), profile,
                   check_slice_length(slice_length), max_size)
        pool.check_each_fits(file=file)
        return pool

    @property
    def n(self) -> int:
        return len(self.lengths)

    def check_each_fits(self, *, file: str | None) -> None:
        """A request that is out of memory even alone with S generated tokens (eq 9 or
        Algorithm 2 at N = 1) cannot be served: a user error naming it."""
        for i, length in enumerate(self.lengths):
            if self.profile.out_of_memory(1, int(length), self.slice_length):
                raise InstanceError(
                    f"request {self.ids[i]!r} does not fit in memory even alone: "
                    f"(L_i + S)·Δ = ({int(length)} + {self.slice_length}) × "
                    f"{self.profile.kv_bytes_per_token:g} B exceeds what the "
                    f"{self.profile.memory_rule} rule allows (eqs 5–9 / Algorithm 2)",
                    file=file, field=f"requests[{i}].input_tokens", value=int(length))

    def serve_ms(self, batch: int, input_tokens: int) -> float:
        """T_serve(N, L_i, S) (eq 1)."""
        return self.profile.serve_ms(batch, input_tokens, self.slice_length)

    def max_batch(self, input_tokens: int) -> int:
        """N_max(L_i, S) of the memory rule (eq 8/9 or Algorithm 2), and at most
        ``max_size``."""
        cap = self.profile.max_batch(input_tokens, self.slice_length)
        return cap if self.max_size is None else min(cap, self.max_size)

    def batch_ms(self, members: Sequence[int]) -> float:
        """Serving time of a batch of these request indices, padded to its longest."""
        return self.serve_ms(len(members), int(self.lengths[list(members)].max()))

    def fits(self, members: Sequence[int]) -> bool:
        return len(members) <= self.max_batch(int(self.lengths[list(members)].max()))

    def total_ms(self, batches: Sequence[Sequence[int]]) -> float:
        return sum(self.batch_ms(b) for b in batches)

    def sorted_order(self) -> np.ndarray:
        """Indices by input length ascending (stable: ties by pool position)."""
        return np.argsort(self.lengths, kind="stable")


def dp_batches(pool: Pool) -> list[list[int]]:
    """Algorithm 1 (eq 10): the batches (lists of pool indices, each sorted by input length),
    in the order the algorithm emits them (longest batch first)."""
    order = pool.sorted_order()
    n = pool.n
    total = [0.0] * (n + 1)   # 𝒯
    split = [0] * (n + 1)     # 𝒫
    for i in range(1, n + 1):
        split[i] = i - 1
        length = int(pool.lengths[order[i - 1]])
        total[i] = total[i - 1] + pool.serve_ms(1, length)
        cap = pool.max_batch(length)
        j = i - 1
        while j > 0 and i - j + 1 <= cap:  # not OOM(i − j + 1, L_i, S)
            t = total[j - 1] + pool.serve_ms(i - j + 1, length)
            if t < total[i]:
                total[i] = t
                split[i] = j - 1
            j -= 1
    batches: list[list[int]] = []
    i = n
    while i > 0:
        p = split[i]
        batches.append([int(k) for k in order[p:i]])
        i = p
    return batches


def fcfs_batches(pool: Pool, size: int) -> list[list[int]]:
    """The batching of SLS and SO (section 5.1, 5.4): the pool in its order (arrival), cut into
    batches of ``size`` (the last one smaller), none sorted or padded-aware."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise OptionError("the fixed batch size must be an integer ≥ 1", field="batch_size",
                          value=size, has_value=True)
    batches = [list(range(k, min(k + size, pool.n))) for k in range(0, pool.n, size)]
    for b in batches:
        if not pool.fits(b):
            raise OptionError(
                f"a batch of {len(b)} padded to {int(pool.lengths[b].max())} tokens runs out of "
                f"memory (eqs 5–9 / Algorithm 2): choose a smaller fixed batch size",
                field="batch_size", value=size)
    return batches


def set_partitions(n: int) -> Iterator[list[list[int]]]:
    """Every partition of {0..n−1} into non-empty blocks, once each (restricted growth)."""
    if n == 0:
        yield []
        return
    for rest in set_partitions(n - 1):
        for k in range(len(rest)):
            yield [*rest[:k], [*rest[k], n - 1], *rest[k + 1:]]
        yield [*rest, [n - 1]]


def brute_force(pool: Pool) -> tuple[float, list[list[int]]]:
    """The least total serving time over every partition of the pool whose batches all fit
    (computed from T_serve and the memory rule directly), and one partition attaining it."""
    if pool.n > BRUTE_MAX:
        raise OptionError(f"brute force enumerates every partition: at most {BRUTE_MAX} "
                          f"requests", field="--solver", value="brute")
    best, arg = float("inf"), None
    for partition in set_partitions(pool.n):
        if all(pool.fits(b) for b in partition):
            t = pool.total_ms(partition)
            if t < best:
                best, arg = t, partition
    assert arg is not None  # every request fits alone (checked when the pool was built)
    return best, arg


def dp_is_exact(pool: Pool) -> tuple[bool, str]:
    """Whether the contiguity lemma of the module docstring holds for this pool: T_serve
    non-decreasing in L for every batch size up to the largest that fits, and the OOM rule
    monotone in L over the pool's lengths. Returns the verdict and its reason."""
    a, _b, c, _d = pool.profile.serve_terms(pool.slice_length)
    lengths = sorted({int(x) for x in pool.lengths})
    n_top = max(pool.max_batch(x) for x in lengths)
    n_top = min(n_top, pool.n)
    if a * 1 + c < 0 or a * n_top + c < 0:
        return False, (f"T_serve decreases in the padded length for some batch size ≤ {n_top} "
                       f"(A·N + C < 0 with A = {a:g}, C = {c:g})")
    caps = [pool.max_batch(x) for x in lengths]
    if any(later > earlier for earlier, later in itertools.pairwise(caps)):
        return False, "the memory rule lets a longer batch hold more requests"
    return True, (f"T_serve = A·N·L + B·N + C·L + D with A·N + C ≥ 0 for N = 1..{n_top} "
                  f"(A = {a:g}, C = {c:g} ms) and N_max non-increasing in L: a contiguous "
                  f"partition of the length-sorted pool is optimal, and the DP of eq 10 is "
                  f"exact over those")


Reader = Callable[[Callable[[Any], int]], list[list[int]]]
FORMULATIONS = ("counts", "assignment")


@dataclass(frozen=True)
class _Levels:
    """The pool's distinct input lengths L_0 < … < L_{K−1} (the possible padded lengths), the
    requests of each (pool indices, shortest first), N_max at each and the cost terms in ns."""

    values: list[int]
    of_length: list[list[int]]
    cap: list[int]
    member_ns: list[int]   # round((A·L_v + B)·1e6): each request of a batch padded to L_v
    batch_ns: list[int]    # round((C·L_v + D)·1e6): each batch padded to L_v

    @classmethod
    def of(cls, pool: Pool) -> _Levels:
        values = sorted({int(x) for x in pool.lengths})
        index = {v: k for k, v in enumerate(values)}
        of_length: list[list[int]] = [[] for _ in values]
        for k in pool.sorted_order():
            of_length[index[int(pool.lengths[k])]].append(int(k))
        a, b, c, d = pool.profile.serve_terms(pool.slice_length)
        return cls(values, of_length, [min(pool.max_batch(v), pool.n) for v in values],
                   [round((a * v + b) * NS_PER_MS) for v in values],
                   [round((c * v + d) * NS_PER_MS) for v in values])

    @property
    def K(self) -> int:
        return len(self.values)

    def level_of(self, pool: Pool, batch: Sequence[int]) -> int:
        return self.values.index(max(int(pool.lengths[k]) for k in batch))


def counts_model(pool: Pool, hint: Sequence[Sequence[int]] | None = None
                 ) -> tuple[cp_model.CpModel, Reader]:
    """The exact set-partition model over all partitions, by counts (formulation ``counts``).

    With the pool's distinct lengths L_0 < … < L_{K−1}, c_v requests of length L_v and
    r_p = #{requests of length ≥ L_p}, integer variables y_v (batches padded to L_v) and n_v
    (requests in those batches)::

        min  Σ_v y_v·(C·L_v + D) + n_v·(A·L_v + B)                 (= Σ_batches T_serve)
        s.t. y_v ≤ c_v,   y_v ≤ n_v ≤ N_max(L_v, S)·y_v             (eq 8/9 or Algorithm 2)
             Σ_v n_v = n,   Σ_{v≥p} n_v ≥ r_p  for every p          (Hall's condition)

    and, redundant (for the relaxation), Σ_{v≥p} y_v ≥ ⌈r_p / max_{v≥p} N_max(L_v, S)⌉: the
    requests of length ≥ L_p need that many batches padded to L_p or more.

    A partition gives (y, n) of its cost: each batch padded to L_v holds a request of length
    L_v, and the requests of length ≥ L_p all sit in batches padded to L_p or more. Conversely,
    a feasible (y, n) is a partition of that cost: give each of the y_v batches a request of
    length L_v, then the other n_v − y_v places at level v accept any request of length ≤ L_v,
    nested sets for which the suffix inequalities are Hall's condition (so a longest-first
    greedy fills them, :func:`_fill`). Nothing here assumes contiguous batches.
    """
    lv = _Levels.of(pool)
    K, n = lv.K, pool.n
    count = [len(g) for g in lv.of_length]
    m = cp_model.CpModel()
    y = [m.new_int_var(0, count[v], f"y_{v}") for v in range(K)]
    size = [m.new_int_var(0, min(n, lv.cap[v] * count[v]), f"n_{v}") for v in range(K)]
    for v in range(K):
        m.add(y[v] <= size[v])
        m.add(size[v] <= lv.cap[v] * y[v])
    m.add(sum(size) == n)
    suffix, top = 0, 0
    for p in reversed(range(K)):
        suffix += count[p]
        top = max(top, lv.cap[p])
        m.add(sum(size[p:]) >= suffix)
        m.add(sum(y[p:]) >= -(-suffix // top))  # redundant, for the relaxation
    m.minimize(sum(lv.batch_ns[v] * y[v] + lv.member_ns[v] * size[v] for v in range(K)))
    if hint is not None:
        hy, hn = [0] * K, [0] * K
        for batch in hint:
            top = lv.level_of(pool, batch)
            hy[top] += 1
            hn[top] += len(batch)
        for v in range(K):
            m.add_hint(y[v], hy[v])
            m.add_hint(size[v], hn[v])

    def read(value: Callable[[Any], int]) -> list[list[int]]:
        return _fill(lv, [value(y[v]) for v in range(K)], [value(size[v]) for v in range(K)])

    return m, read


def _fill(lv: _Levels, y: list[int], size: list[int]) -> list[list[int]]:
    """The batches of a (y, n) solution: leaders of each length first, then the other places,
    longest level first, filled with the longest requests left (Hall's condition makes every
    one fit), spread over the level's batches round-robin (at most N_max each)."""
    left = [list(g) for g in lv.of_length]
    groups = [[[left[v].pop()] for _ in range(y[v])] for v in range(lv.K)]
    rest = [k for v in range(lv.K) for k in left[v]]   # shortest first
    for v in reversed(range(lv.K)):
        take = size[v] - y[v]
        members = [rest.pop() for _ in range(take)]
        for slot, k in enumerate(members):
            groups[v][slot % y[v]].append(k)
    return [b for v in reversed(range(lv.K)) for b in groups[v]]


def assignment_model(pool: Pool, hint: Sequence[Sequence[int]] | None = None
                     ) -> tuple[cp_model.CpModel, Reader]:
    """The exact set-partition model over all partitions, requests assigned by padded length
    (formulation ``assignment``).

    Let L_1 < … < L_K be the pool's distinct input lengths and c_u the number of requests of
    length L_u. A batch's padded length is the length of its longest member, so every batch has
    one of these K lengths. Integer variables: y_v, the number of batches padded to L_v, and
    z_uv (u ≤ v), the number of requests of length L_u in batches padded to L_v. With A..D of
    :meth:`SclsProfile.serve_terms` (T_serve = A·N·L + B·N + C·L + D)::

        min  Σ_v y_v·(C·L_v + D) + Σ_{u≤v} z_uv·(A·L_v + B)      (= Σ_batches T_serve)
        s.t. Σ_{v≥u} z_uv = c_u                     every request in exactly one batch
             y_v ≤ z_vv                             each batch holds a request of its length
             Σ_{u≤v} z_uv ≤ N_max(L_v, S)·y_v       eq 8/9 or Algorithm 2 per batch

    Every partition gives a solution of its cost, and every solution is a partition of that
    cost (one request of length L_v in each of the y_v batches, the other members spread with at
    most N_max(L_v, S) per batch), so the model is exact over all partitions, contiguous or not.
    Requests of equal length are interchangeable, which the counts exploit (no symmetric
    solutions). Costs are rounded to the nanosecond (one term per request). Returns the model
    and a function that reads the batches (pool indices) from a solution.
    """
    order = [int(k) for k in pool.sorted_order()]
    values = sorted({int(x) for x in pool.lengths})
    of_length: dict[int, list[int]] = {v: [] for v in values}
    for k in order:
        of_length[int(pool.lengths[k])].append(k)
    count = [len(of_length[v]) for v in values]
    K, n = len(values), pool.n
    a, b, c, d = pool.profile.serve_terms(pool.slice_length)
    m = cp_model.CpModel()
    cap = [min(pool.max_batch(values[v]), n) for v in range(K)]
    y = [m.new_int_var(0, count[v], f"y_{v}") for v in range(K)]
    z = {(u, v): m.new_int_var(0, count[u], f"z_{u}_{v}") for v in range(K)
         for u in range(v + 1)}
    for u in range(K):
        m.add(sum(z[u, v] for v in range(u, K)) == count[u])
    for v in range(K):
        m.add(y[v] <= z[v, v])
        m.add(sum(z[u, v] for u in range(v + 1)) <= cap[v] * y[v])
    member = [round((a * values[v] + b) * NS_PER_MS) for v in range(K)]
    leader = [round((c * values[v] + d) * NS_PER_MS) for v in range(K)]
    m.minimize(sum(leader[v] * y[v] for v in range(K))
               + sum(member[v] * z[u, v] for (u, v) in z))
    if hint is not None:
        index = {x: v for v, x in enumerate(values)}
        hy = [0] * K
        hz = dict.fromkeys(z, 0)
        for batch in hint:
            top = index[max(int(pool.lengths[k]) for k in batch)]
            hy[top] += 1
            for k in batch:
                hz[index[int(pool.lengths[k])], top] += 1
        for v in range(K):
            m.add_hint(y[v], hy[v])
        for key, var in z.items():
            m.add_hint(var, hz[key])

    def read(value: Callable[[Any], int]) -> list[list[int]]:
        left = {v: list(of_length[values[v]]) for v in range(K)}  # shortest-first queues
        batches: list[list[int]] = []
        for v in reversed(range(K)):
            groups = [[left[v].pop()] for _ in range(value(y[v]))]
            members = [left[u].pop() for u in range(v + 1)
                       for _ in range(value(z[u, v]) - (value(y[v]) if u == v else 0))]
            for slot, k in enumerate(members):
                groups[slot % len(groups)].append(k)
            batches.extend(groups)
        return batches

    return m, read


def solve(instance: Instance, solver: str = "dp", time_limit_s: float | None = 60.0,
          progress: Progress = SILENT, slice_length: int = DEFAULT_SLICE_LENGTH,
          workers: int | None = None, formulation: str = "counts",
          max_size: int | None = None) -> Result:
    """Partition the instance's requests into batches of least total serving time (eq 10),
    at most ``max_size`` requests per batch when given (PM of section 5.4)."""
    pool = Pool.from_instance(instance, slice_length, max_size)
    return solve_pool(pool, solver, time_limit_s, progress, workers=workers,
                      formulation=formulation)


def _check_partition(pool: Pool, batches: list[list[int]], formulation: str) -> None:
    """A model's answer read back as batches must be a partition whose batches all fit."""
    if sorted(k for b in batches for k in b) != list(range(pool.n)) or not all(
            b and pool.fits(b) for b in batches):
        raise InternalError(f"the {formulation} model's solution is not a partition of "
                            f"batches that fit: a bug")


def solve_pool(pool: Pool, solver: str = "dp", time_limit_s: float | None = 60.0,
               progress: Progress = SILENT, workers: int | None = None,
               formulation: str = "counts") -> Result:
    """:func:`solve` on a :class:`Pool`."""
    t0 = time.perf_counter()
    version = f"llmopt {__version__}"
    if solver == "dp":
        progress.stage(f"Algorithm 1 (eq 10) on {pool.n} requests")
        batches = dp_batches(pool)
        exact, why = dp_is_exact(pool)
        if exact:  # the DP's plan is its own bound
            return _result(pool, "dp", _verdict(pool, batches, pool.total_ms(batches), why),
                           batches, version, t0, time_limit_s)
        return _result(pool, "dp", _verdict(pool, batches, None, None), batches, version, t0,
                       time_limit_s, notes=[f"the DP may miss the optimum: {why}"])
    if solver == "brute":
        progress.stage(f"every partition of {pool.n} requests")
        best, batches = brute_force(pool)
        proof = proof_text("complete enumeration", f"of the partitions of {pool.n} requests")
        return _result(pool, "brute", _verdict(pool, batches, best, proof), batches, version,
                       t0, time_limit_s)
    if solver == "cpsat":
        start = dp_batches(pool)
        if formulation not in FORMULATIONS:
            raise OptionError(f"unknown formulation (known: {', '.join(FORMULATIONS)})",
                              field="--formulation", value=formulation)
        progress.stage(f"CP-SAT on the {formulation} set-partition model ({pool.n} requests)")
        build = counts_model if formulation == "counts" else assignment_model
        model, read = build(pool, hint=start)
        out = cpsat_backend.solve_cpsat(
            model, time_limit_s=time_limit_s, progress=progress, scale=1 / NS_PER_MS,
            unit=" ms", workers=workers, collect=read)
        if out.solution is not None:
            _check_partition(pool, out.solution, formulation)
        _, batches = keep_better((pool.total_ms(start), start), None if out.solution is None
                                 else (pool.total_ms(out.solution), out.solution))
        if out.ending == "infeasible":  # cannot happen: every request fits alone
            return Result("scls-batching", "cpsat", "infeasible", None, None,
                          time.perf_counter() - t0, time_limit_s, out.solver_version)
        # any partition's rounded cost is within n × 0.5 ns of its cost
        bound = None if out.bound is None else out.bound / NS_PER_MS - pool.n * 0.5e-6
        verdict = _verdict(pool, batches, bound, proof_text(
            "CP-SAT", f"proved the set-partition model optimal ({out.message}); costs rounded "
                      f"to 1 ns, at most {pool.n} × 0.5 ns per partition"))
        return _result(pool, "cpsat", verdict, batches, out.solver_version, t0, time_limit_s,
                       interrupted=out.interrupted,
                       notes=[] if verdict.optimal else [out.message])
    raise OptionError(f"unknown solver (known: {', '.join(SOLVERS)})", field="--solver",
                      value=solver)


def _verdict(pool: Pool, batches: list[list[int]], bound: float | None,
             proof: str | None) -> Verdict:
    """:func:`outcome.decide` on the partition's total serving time, equal to ``bound``
    within 1 ppm or n × 1 ns (costs rounded both ways in the CP-SAT models)."""
    objective = pool.total_ms(batches)
    return decide(objective, bound, proof=proof,
                  tol=max(OPTIMAL_RTOL * objective, pool.n * 1e-6),
                  what="the total serving time (ms)")


def _result(pool: Pool, solver: str, verdict: Verdict, batches: list[list[int]],
            version: str, t0: float, time_limit_s: float | None, *,
            interrupted: bool = False, notes: list[str] | None = None) -> Result:
    rows: list[dict[str, Any]] = []
    for b in sorted(batches, key=lambda b: -pool.batch_ms(b)):
        length = int(pool.lengths[b].max())
        rows.append({"requests": [pool.ids[k] for k in b], "size": len(b),
                     "input_tokens": length,
                     "pad_tokens": int(sum(length - int(pool.lengths[k]) for k in b)),
                     "serve_ms": round(pool.batch_ms(b), 6),
                     "kv_gib": round(pool.profile.kv_bytes(len(b), length, pool.slice_length)
                                     / GIB, 6),
                     "max_batch": pool.max_batch(length)})
    return Result(
        problem="scls-batching", solver=solver, status=verdict.status,
        objective=round(pool.total_ms(batches), 6), bound=verdict.bound,
        runtime_s=time.perf_counter() - t0, time_limit_s=time_limit_s, solver_version=version,
        proof=verdict.proof, interrupted=interrupted, notes=notes or [],
        data=BatchingData(pool.slice_length, pool.profile.memory_rule, pool.max_size, rows),
    )


@dataclass
class BatchingData:
    """An SCLS batching's solution data (``Result.data``): the slice length S, the memory rule
    and batch-size cap it ran with, and one row per batch, longest serve first (its requests,
    size, padded input length, pad tokens, serve time, KV GiB and N_max)."""

    slice_length: int
    memory_rule: str
    max_size: int | None
    batches: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"slice_length": self.slice_length, "memory_rule": self.memory_rule,
                "max_size": self.max_size, "batches": self.batches}


__all__ = ["BRUTE_MAX", "DEFAULT_SLICE_LENGTH", "FORMULATIONS", "SOLVERS", "Pool",
           "assignment_model", "brute_force", "check_slice_length", "counts_model",
           "dp_batches", "dp_is_exact", "fcfs_batches", "set_partitions", "solve", "solve_pool"]
