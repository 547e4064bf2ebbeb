"""Slice-level cluster simulation (Cheng et al. 2024, sections 2.4 and 4, Fig. 7): padded static
batches served slice by slice on W instances, on one event clock.

What one batch does (sections 2.4, 4.2–4.3; :func:`serve_slice`): it pads every member to the
batch's longest current prompt L_i (input + tokens generated in earlier slices: a re-batched
request prefills them again, its KVs recomputed), then runs L_o = min(S, max remaining) decode
iterations (the slice, or fewer when every member finishes early: the early return of section
4.2). Every member takes part in every iteration, so a member that finished keeps generating
*invalid* tokens until the batch ends. The batch takes T_serve(N, L_i, L_o) (eqs 1–4), holds
M_kv(N, L_i, L_o) = (L_i + L_o)·N·Δ (eq 5), and returns its finished members *at its end*
(static batching returns a batch's results together); the unfinished ones go back to the
scheduler.

Two ways requests reach the instances (:class:`Dispatch`), the scheduler's choice; what it
decides within them is given to the engine (:class:`SliceStrategies`, built by the scheduler:
:mod:`llmopt.policies.slice` has SCLS and its ladder):

``pool``   a central pool. Every period (from the first arrival on) the pooled requests
           (arrived, unfinished, not queued or running) are partitioned into batches by the
           *batcher*, which also estimates each batch's serving time, and the batches go to the
           instances' local queues as the *offloader* assigns and orders them (it is told when
           an instance finishes a batch). The next period starts when the *interval* says.
           Requests returned by a batch wait for the next period.
``route``  each arriving request, and every unfinished request returned by a batch, goes to the
           local queue of the instance the *local batcher* deals it to; an idle instance takes
           from its queue the batch the local batcher forms (it does not wait to fill one).

An instance serves its local queue one batch after another. The engine runs on the simulation's
clock (:mod:`llmopt.sim.clock`); events at one instant are taken in the order: batch ends,
arrivals, the period; then idle instances start their next batch.

First token time: eq 2 counts L_o decode iterations after the prefill, each yielding one token,
so a request's first token is at the end of the first decode iteration of its first batch
(batch start + T_prefill(N, L_i) + τ_decode(L_i + 1, N)). Finish time: the end of the batch in
which it generated its last token.

Times in ms, sizes in tokens. The result, :class:`SliceReplay`, keeps per request, per batch,
per batch member and per instance tables, and converts to llmopt's :class:`Schedule`
(:meth:`SliceReplay.to_schedule`) for the Gantt and the usual metrics.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import numpy as np
import pandas as pd

from llmopt.data.cost.scls import SclsProfile, check_slice_length
from llmopt.data.instance import Instance
from llmopt.errors import InternalError, OptionError, ProfileError
from llmopt.schedule import Schedule
from llmopt.sim.clock import Clock

_BATCH_END, _ARRIVAL, _PERIOD = 0, 1, 2  # order of simultaneous events


# --- one slice of one padded static batch ---------------------------------------------------
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
    generate (≥ 1). L_o = min(S, max remaining) iterations; time by eqs 1–4, memory by eq 5."""
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


# --- the result -----------------------------------------------------------------------------
def section5_request_metrics(requests: pd.DataFrame, runs: pd.DataFrame,
                             completion_ms: Sequence[float], workers: int) -> dict[str, float]:
    """The section 5 measures every serving scheme has, slice-level or not: request throughput
    (requests per second from the first arrival to the last finish), response time (finish −
    arrival) mean and p95, the last finish, the per-instance completion times and their
    population standard deviation (Fig. 17), and the standard deviation of the instances' busy
    time (the summed ``end_ms − start_ms`` of ``runs``, batches or iterations, by ``instance``).
    Not rounded."""
    response = (requests["finish_ms"] - requests["arrival_ms"]).to_numpy(dtype=float)
    n = len(requests)
    span = float(requests["finish_ms"].max() - requests["arrival_ms"].min()) if n else 0.0
    done = np.asarray(completion_ms, dtype=float)
    busy = np.bincount(runs["instance"].to_numpy(dtype=np.int64),
                       weights=(runs["end_ms"] - runs["start_ms"]).to_numpy(dtype=float),
                       minlength=workers)
    out: dict[str, float] = {
        "requests": float(n),
        "throughput_rps": n / (span / 1000.0) if span > 0 else 0.0,
        "response_mean_ms": float(response.mean()) if n else 0.0,
        "response_p95_ms": float(np.percentile(response, 95)) if n else 0.0,
        "makespan_ms": float(requests["finish_ms"].max()) if n else 0.0,
        "completion_std_ms": float(done.std()),
        "busy_std_ms": float(busy.std()),
    }
    for w, t in enumerate(done):
        out[f"completion_ms_{w}"] = float(t)
    return out


@dataclass
class SliceReplay:
    """A slice-level replay.

    ``requests``  one row per request (instance order): ``request, input_tokens,
                  output_tokens, arrival_ms, first_token_ms, finish_ms, instance`` (of its last
                  batch), ``slices`` (batches it was in), ``pad_tokens, invalid_tokens``
                  (summed over its slices).
    ``batches``   one row per batch in start order: ``batch, instance, period`` (the period
                  that formed it; −1 when routed), ``start_ms, end_ms, size, padded_length,
                  iterations, early_return, prefill_ms, estimate_ms`` (T_serve(N, L_i, S), the
                  offloader's estimate), ``kv_bytes`` (eq 5 at the iterations run).
    ``members``   one row per request per batch: ``batch, request`` (row index into
                  ``requests``), ``slot`` (position in the batch), ``prompt_tokens, pad_tokens,
                  generated, invalid_tokens, finished``.
    ``periods_ms`` the start of every period (pool dispatch); ``completion_ms`` the end of each
                  instance's last batch (0 when it served none).
    """

    policy: str
    workers: int
    slice_length: int
    profile: SclsProfile
    requests: pd.DataFrame
    batches: pd.DataFrame
    members: pd.DataFrame
    periods_ms: list[float]
    completion_ms: list[float]
    scheduler: object = None  # the scheduler's parameters, as it gave them

    def metrics(self) -> dict[str, float]:
        """Issue 17 item 7 (the paper's section 5 metrics): request throughput (requests per
        second from the first arrival to the last finish), response time (finish − arrival)
        mean and p95, per-instance completion time and its standard deviation (population, as
        one number per instance; Fig. 17), average batch size (over batches, Fig. 13b), pad
        and invalid tokens per request (summed over a request's slices, Fig. 13a/c), slices
        per request and the share of batches that returned early (Fig. 14)."""
        req, bat = self.requests, self.batches
        out = section5_request_metrics(req, bat, self.completion_ms, self.workers)
        out |= {
            "batches": float(len(bat)),
            "batch_size_mean": float(bat["size"].mean()) if len(bat) else 0.0,
            "pad_tokens_per_request": float(req["pad_tokens"].mean()) if len(req) else 0.0,
            "invalid_tokens_per_request": float(req["invalid_tokens"].mean())
            if len(req) else 0.0,
            "slices_per_request": float(req["slices"].mean()) if len(req) else 0.0,
            "early_return_share": float(bat["early_return"].mean()) if len(bat) else 0.0,
        }
        return {k: round(v, 6) for k, v in out.items()}

    def to_schedule(self) -> Schedule:
        """The replay as llmopt's :class:`Schedule`: per request per batch a ``prefill``
        segment (``refill`` when the request was served before: its KVs are recomputed) over
        the batch's prefill and a ``decode`` segment to the batch's end (a finished member keeps
        its slot, generating invalid tokens); ``client`` = the slot in the batch, so a model
        instance has as many clients as its largest batch. The iteration log has one prefill
        row and L_o decode rows per batch, each timed by eqs 3–4, with the padded KVs of eq 5
        (pad and invalid tokens included) as ``kv_tokens``. A request's ``evictions`` counts its
        returns to the scheduler (slices − 1): each drops its KVs."""
        bat, mem, req = self.batches, self.members, self.requests
        p = self.profile
        size = bat["size"].to_numpy(dtype=np.int64)
        length = bat["padded_length"].to_numpy(dtype=np.int64)
        iters = bat["iterations"].to_numpy(dtype=np.int64)
        start = bat["start_ms"].to_numpy(dtype=float)
        prefill_end = start + bat["prefill_ms"].to_numpy(dtype=float)
        inst = bat["instance"].to_numpy(dtype=np.int64)
        b = mem["batch"].to_numpy(dtype=np.int64)
        r = mem["request"].to_numpy(dtype=np.int64)
        names = req["request"].to_numpy()
        first = np.zeros(len(mem), dtype=bool)
        _, first_rows = np.unique(r, return_index=True)
        first[first_rows] = True  # members are in start order: a request's first batch first
        slot = mem["slot"].to_numpy(dtype=np.int64)
        n = len(mem)
        seg = pd.DataFrame({
            "request": pd.Categorical(np.concatenate([names[r], names[r]]),
                                      categories=list(names)),
            "client": np.concatenate([slot, slot]).astype(np.int32),
            "instance": np.concatenate([inst[b], inst[b]]).astype(np.int32),
            "phase": pd.Categorical(np.concatenate([np.where(first, "prefill", "refill"),
                                                    np.full(n, "decode")]),
                                    categories=["prefill", "decode", "refill", "evict"]),
            "start_ms": np.concatenate([start[b], prefill_end[b]]),
            "end_ms": np.concatenate([prefill_end[b], bat["end_ms"].to_numpy(dtype=float)[b]]),
            "tokens": np.concatenate([mem["prompt_tokens"].to_numpy(),
                                      mem["generated"].to_numpy()]).astype(np.int32),
        }).sort_values(["start_ms", "instance", "client"], kind="stable").reset_index(drop=True)
        # decode iterations: batch k's l-th (l = 1..L_o) takes τ_decode(L_i + l, N) (eq 4)
        owner = np.repeat(np.arange(len(bat)), iters)
        offset = np.concatenate([[0], np.cumsum(iters)[:-1]]) if len(bat) else np.zeros(0, int)
        step = np.arange(int(iters.sum())) - np.repeat(offset, iters) + 1
        cached = length[owner] + step
        tau = p.decode.c1 * size[owner] * cached + p.decode.c2 * size[owner] \
            + p.decode.c3 * cached + p.decode.c4
        within = np.cumsum(tau) - np.repeat(np.concatenate([[0.0], np.cumsum(tau)])[offset],
                                            iters)
        dec_end = prefill_end[owner] + within
        dec_start = dec_end - tau
        its = pd.DataFrame({
            "instance": np.concatenate([inst, inst[owner]]).astype(np.int32),
            "start_ms": np.concatenate([start, dec_start]),
            "end_ms": np.concatenate([prefill_end, dec_end]),
            "phase": pd.Categorical(np.concatenate([np.full(len(bat), "prefill"),
                                                    np.full(len(owner), "decode")]),
                                    categories=["prefill", "decode", "mixed"]),
            "batch_size": np.concatenate([size, size[owner]]).astype(np.int32),
            "prefill_tokens": np.concatenate([size * length,
                                              np.zeros(len(owner), np.int64)]).astype(np.int64),
            "decode_tokens": np.concatenate([np.zeros(len(bat), np.int64),
                                             size[owner]]).astype(np.int64),
            "kv_tokens": np.concatenate([size * length, size[owner] * cached]).astype(np.int64),
            "evictions": np.zeros(len(bat) + len(owner), dtype=np.int32),
            "running": np.concatenate([size, size[owner]]).astype(np.int32),
        }).sort_values(["instance", "start_ms"], kind="stable").reset_index(drop=True)
        last_slot = mem.groupby("request")["slot"].last()
        requests = pd.DataFrame({
            "request": pd.Categorical(names, categories=list(names)),
            "instance": req["instance"].to_numpy(dtype=np.int32),
            "client": last_slot.reindex(range(len(req))).fillna(0).to_numpy(dtype=np.int32),
            "input_tokens": req["input_tokens"].to_numpy(dtype=np.int32),
            "output_tokens": req["output_tokens"].to_numpy(dtype=np.int32),
            "arrival_ms": req["arrival_ms"].to_numpy(dtype=float),
            "first_token_ms": req["first_token_ms"].to_numpy(dtype=float),
            "finish_ms": req["finish_ms"].to_numpy(dtype=float),
            "evictions": (req["slices"].to_numpy() - 1).astype(np.int32),
        })
        largest = int(size.max()) if len(size) else 1
        return Schedule(policy=self.policy, segments=seg, iterations=its, requests=requests,
                        clients=self.workers * largest)


# --- what the scheduler decides -------------------------------------------------------------
class Dispatch(StrEnum):
    """How requests reach the instances (see the module docstring)."""

    POOL = "pool"
    ROUTE = "route"


class PoolBatcher(Protocol):
    def batches(self, prompts: list[int], ids: list[str]) -> tuple[list[list[int]], list[float]]:
        """The pooled requests (their current prompts, in arrival order) partitioned into
        batches (positions in ``prompts``), with each batch's estimated serving time (ms)."""
        ...


class Offloader(Protocol):
    def offload(self, estimates: list[float]) -> tuple[list[int], list[int]]:
        """The instance of each batch of a period, and the order they join their queues."""
        ...

    def served(self, worker: int, estimate: float) -> None:
        """Instance ``worker`` finished a batch estimated at ``estimate`` ms."""
        ...


class Interval(Protocol):
    def next_ms(self) -> float:
        """The time from this period to the next one (ms)."""
        ...


class LocalBatcher(Protocol):
    def deal(self) -> int:
        """The instance that takes the next arriving or returned request."""
        ...

    def take(self, queue: deque[int], prompt_of: Callable[[int], int], ids: list[str]
             ) -> tuple[int, float]:
        """How many requests from the head of an idle instance's ``queue`` form its next batch
        (``prompt_of``: a request's current prompt; ``ids``: the requests' ids), and the
        batch's estimated time (ms)."""
        ...


@dataclass
class SliceStrategies:
    """A slice-level scheduler as the engine runs it: the dispatch and, for a pool, the
    batcher, the offloader and the interval; for routing, the local batcher. ``check`` refuses
    requests the scheduler can never serve (current prompts, ids, the instance's label)."""

    dispatch: Dispatch
    check: Callable[[list[int], list[str], str], None]
    batcher: PoolBatcher | None = None
    offloader: Offloader | None = None
    interval: Interval | None = None
    local: LocalBatcher | None = None


class SlicePolicy(Protocol):
    """A slice-level scheduler: its name, its slice length S and its strategies for a run."""

    @property
    def name(self) -> str: ...

    @property
    def slice_length(self) -> int: ...

    def strategies(self, profile: SclsProfile, workers: int, label: str) -> SliceStrategies:
        """The strategies of one run on ``workers`` instances (``label``: the instance's, for
        error messages)."""
        ...


# --- the simulation -------------------------------------------------------------------------
class _State:
    """Per-request progress (arrays indexed like the instance's requests)."""

    def __init__(self, instance: Instance) -> None:
        self.ids = list(instance.ids)
        self.input = instance.input_tokens.astype(np.int64)
        self.output = instance.output_tokens.astype(np.int64)
        self.arrival = instance.arrival_ms.astype(float)
        n = len(self.ids)
        self.generated = np.zeros(n, dtype=np.int64)
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.pad = np.zeros(n, dtype=np.int64)
        self.invalid = np.zeros(n, dtype=np.int64)
        self.slices = np.zeros(n, dtype=np.int64)
        self.where = np.full(n, -1, dtype=np.int64)

    def prompt(self, i: int) -> int:
        """Request ``i``'s current prompt: its input and the tokens generated so far."""
        return int(self.input[i] + self.generated[i])


class _Cluster:
    def __init__(self, instance: Instance, policy: SlicePolicy, workers: int) -> None:
        profile = instance.profile
        if not isinstance(profile, SclsProfile):
            raise ProfileError("slice-level scheduling needs an scls profile (eqs 1–9)",
                               file=instance.label(), field="model", value=profile.name)
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise OptionError("at least one instance is needed", field="instances",
                              value=workers, has_value=True)
        self.label = instance.label()
        self.profile = profile
        self.policy = policy
        self.s = policy.slice_length
        self.w = workers
        self.how = policy.strategies(profile, workers, self.label)
        self.st = _State(instance)
        self.how.check(self.st.input.tolist(), self.st.ids, self.label)
        self.clock = Clock(self.st.arrival.tolist(), arrival_kind=_ARRIVAL)
        self.queue: list[deque[tuple[list[int], float, int]]] = [deque() for _ in range(workers)]
        self.local: list[deque[int]] = [deque() for _ in range(workers)]
        self.running: list[tuple[list[int], float] | None] = [None] * workers
        self.pool: list[int] = []
        self.unfinished = len(self.st.ids)
        self.periods: list[float] = []
        self.completion = [0.0] * workers
        self.batch_rows: list[tuple] = []
        self.member_rows: list[tuple] = []

    # --- dispatch ---------------------------------------------------------------------------
    def period(self, now: float) -> None:
        """Batch the pool, offload the batches, schedule the next period."""
        k = len(self.periods)
        self.periods.append(now)
        batcher, offloader, interval = self.how.batcher, self.how.offloader, self.how.interval
        assert batcher is not None and offloader is not None and interval is not None
        if self.pool:
            st = self.st
            members = sorted(self.pool, key=lambda i: (st.arrival[i], i))
            self.pool = []
            prompts = (st.input[members] + st.generated[members]).tolist()
            groups, estimates = batcher.batches(prompts, [st.ids[i] for i in members])
            targets, order = offloader.offload(estimates)
            for j in order:
                self.queue[targets[j]].append(([members[x] for x in groups[j]], estimates[j],
                                               k))
        if self.unfinished:
            self.clock.push(now + interval.next_ms(), _PERIOD, -1)

    def take_local(self, w: int) -> None:
        """An idle routed instance forms its next batch from its queue."""
        assert self.how.local is not None
        q = self.local[w]
        size, estimate = self.how.local.take(q, self.st.prompt, self.st.ids)
        self.queue[w].append(([q.popleft() for _ in range(size)], estimate, -1))

    # --- serving ----------------------------------------------------------------------------
    def start(self, w: int, now: float) -> None:
        batch, estimate, k = self.queue[w].popleft()
        st = self.st
        prompts = (st.input[batch] + st.generated[batch]).tolist()
        remaining = (st.output[batch] - st.generated[batch]).tolist()
        out = serve_slice(self.profile, prompts, remaining, self.s)
        n, length = len(batch), out.padded_length
        prefill = self.profile.prefill_ms(n, length)
        end = now + out.serve_ms
        first_token = now + prefill + self.profile.decode_iteration_ms(length + 1, n)
        bid = len(self.batch_rows)
        self.batch_rows.append((bid, w, k, now, end, n, length, out.iterations,
                                out.early_return, prefill, estimate, out.kv_bytes))
        for slot, i in enumerate(batch):
            if st.generated[i] == 0:
                st.first[i] = first_token
            st.generated[i] += out.generated[slot]
            st.pad[i] += out.pad_tokens[slot]
            st.invalid[i] += out.invalid_tokens[slot]
            st.slices[i] += 1
            st.where[i] = w
            self.member_rows.append((bid, i, slot, prompts[slot], out.pad_tokens[slot],
                                     out.generated[slot], out.invalid_tokens[slot],
                                     out.finished[slot]))
        self.running[w] = (batch, estimate)
        self.clock.push(end, _BATCH_END, w)

    def batch_end(self, w: int, now: float) -> None:
        running = self.running[w]
        if running is None:
            raise InternalError(f"instance {w} ended a batch it was not running")
        batch, estimate = running
        self.running[w] = None
        self.completion[w] = now
        if self.how.offloader is not None:
            self.how.offloader.served(w, estimate)
        st = self.st
        for i in batch:
            if st.generated[i] >= st.output[i]:
                st.finish[i] = now
                self.unfinished -= 1
            else:
                self.arrive(i)

    def arrive(self, i: int) -> None:
        """Request ``i`` arrives, or comes back from a batch unfinished."""
        if self.how.dispatch is Dispatch.POOL:
            self.pool.append(i)
        else:
            assert self.how.local is not None
            self.local[self.how.local.deal()].append(i)

    def run(self) -> SliceReplay:
        clock = self.clock
        first = clock.next_arrival_ms()
        if self.how.dispatch is Dispatch.POOL and first is not None:
            clock.push(first, _PERIOD, -1)
        while clock:
            now = clock.next_time()
            while clock and clock.next_time() == now:
                _, kind, payload = clock.pop()
                if kind == _BATCH_END:
                    self.batch_end(payload, now)
                elif kind == _ARRIVAL:
                    self.arrive(payload)
                else:
                    self.period(now)
            for w in range(self.w):
                if self.running[w] is None:
                    if not self.queue[w] and self.local[w]:
                        self.take_local(w)
                    if self.queue[w]:
                        self.start(w, now)
        if self.unfinished:
            raise InternalError(f"{self.unfinished} requests never finished")
        return self.result()

    def result(self) -> SliceReplay:
        st = self.st
        requests = pd.DataFrame({
            "request": st.ids, "input_tokens": st.input, "output_tokens": st.output,
            "arrival_ms": st.arrival, "first_token_ms": st.first, "finish_ms": st.finish,
            "instance": st.where, "slices": st.slices, "pad_tokens": st.pad,
            "invalid_tokens": st.invalid})
        batches = pd.DataFrame(self.batch_rows, columns=[
            "batch", "instance", "period", "start_ms", "end_ms", "size", "padded_length",
            "iterations", "early_return", "prefill_ms", "estimate_ms", "kv_bytes"])
        members = pd.DataFrame(self.member_rows, columns=[
            "batch", "request", "slot", "prompt_tokens", "pad_tokens", "generated",
            "invalid_tokens", "finished"])
        return SliceReplay(self.policy.name, self.w, self.s, self.profile, requests, batches,
                           members, self.periods, self.completion, self.policy)


def simulate_slices(instance: Instance, policy: SlicePolicy, instances: int = 1
                    ) -> SliceReplay:
    """Replay ``instance`` (an ``scls`` profile) on ``instances`` model instances under the
    slice-level scheduler ``policy`` (see the module docstring)."""
    return _Cluster(instance, policy, instances).run()


__all__ = ["Dispatch", "Interval", "LocalBatcher", "Offloader", "PoolBatcher", "SliceOutcome",
           "SlicePolicy", "SliceReplay", "SliceStrategies", "section5_request_metrics",
           "serve_slice", "simulate_slices"]
