"""SOLA's scheduling overhead inside the replay (issue 15): the full one-hour Azure 2023
conversation trace (19,366 requests, ../shared/data) on the InferMax Llama-3-70B profile with
SLOs (5x the single-request latency, SOLA's tight rule for 70B models), replayed by ``sola`` and
by ``sarathi`` (and ``vllm-v1`` for reference). Target: SOLA in under 2x sarathi's time. Writes
the ``sola-overhead`` section of docs/benchmarks.md.

Usage::

    python bench/sola_overhead.py [--repeat 3] [--write-docs]
"""

from __future__ import annotations

import math
import statistics
import timeit

import numpy as np
from _common import ROOT, command_line, docs_parser, header, publish, require_data, timed_runs

from llmopt.data.instance import instance_from_mapping, load_instance
from llmopt.data.slo import SloSpec
from llmopt.policies.infermax.unified import UnifiedScheduler
from llmopt.policies.replay import replay
from llmopt.policies.slo.sola import Sola
from llmopt.policies.slo.vllm_v1 import VllmV1

POLICIES = ("sarathi", "vllm-v1", "sola")
POLICY_CLASSES = {"sarathi": UnifiedScheduler, "vllm-v1": VllmV1, "sola": Sola}
SOURCE = ROOT / "instances" / "paper" / "azure-conv-infermax.yaml"


def with_slos():
    """azure-conv-infermax.yaml with ``slo: {multiple: 5}``."""
    require_data(SOURCE)
    base = load_instance(SOURCE)
    inst = instance_from_mapping({
        "name": "azure-conv-slo", "model": base.profile.name,
        "system": base.system.model_dump(exclude_none=True),
        "requests": [r.model_dump(exclude_none=True) for r in base.requests],
        "slo": SloSpec(multiple=5).model_dump(exclude_none=True)})
    assert inst.has_slos and inst.num_requests == base.num_requests
    return inst


def policy_calls(inst, policy: str) -> int:
    """How many times the replay asks ``policy`` for a batch (its ``next_batch`` calls)."""
    cls = POLICY_CLASSES[policy]
    calls = 0
    original = cls.next_batch

    def counted(self, r):
        nonlocal calls
        calls += 1
        return original(self, r)

    cls.next_batch = counted  # type: ignore[method-assign]
    try:
        replay(inst, policy)
    finally:
        cls.next_batch = original  # type: ignore[method-assign]
    return calls


def vectorised_decode_monitor_us(decoders: int = 80, repeat: int = 20000) -> float:
    """Microseconds per call of a numpy version of only the decode side of SOLA's monitor
    (real-time TPOT ratios and their maximum, predicted remaining lengths from a sorted output
    table, eq 1's slack and the predicted-TPOT ordering) over ``decoders`` running requests:
    what a vectorised monitor would cost at the least, per decision."""
    rng = np.random.default_rng(0)
    n = 19366
    first, tpot_target = rng.random(n), rng.random(n) + 1
    members = sorted(rng.choice(n, decoders, replace=False).tolist())
    generated = rng.integers(1, 500, decoders).tolist()
    outputs = np.sort(rng.integers(1, 1000, 5000))

    def decide():
        d = np.fromiter(members, np.int64, decoders)
        g = np.fromiter(generated, np.int64, decoders)
        tpot = np.where(g >= 2, (1e6 - first[d]) / np.maximum(g - 1, 1), 0.0)
        worst = (tpot / tpot_target[d]).max()
        at = np.searchsorted(outputs, g, side="right")
        left = np.maximum(outputs[np.minimum((at + len(outputs) - 1) // 2,
                                             len(outputs) - 1)] - g, 0)
        predicted = (tpot * g + 3.0 * left) / np.maximum(g + left, 1) / tpot_target[d]
        order = d[np.argsort(-predicted, kind="stable")].tolist()
        slack = ((tpot_target[d] - tpot) * g)[tpot > 0]
        return order, worst, slack.min() if len(slack) else math.inf

    return timeit.timeit(decide, number=repeat) / repeat * 1e6


def main() -> None:
    ap = docs_parser(__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    inst = with_slos()
    medians, rows = {}, []
    running = 0.0
    for policy in POLICIES:
        times, sched = timed_runs(lambda p=policy: replay(inst, p), args.repeat)
        medians[policy] = statistics.median(times)
        m = sched.metrics()
        calls = policy_calls(inst, policy)
        rows.append((policy, medians[policy], max(times), len(sched.iterations), calls,
                     m["evictions"]))
        if policy == "sola":
            running = float(sched.iterations["running"].mean())
        print(rows[-1], flush=True)
    base = medians["sarathi"]
    table = "\n".join(
        f"| {p} | {med:.2f} s | {worst:.2f} s | {med / base:.1f}× | {its:,} | {calls:,} | "
        f"{med / calls * 1e6:.0f} µs | {ev:,} |"
        for p, med, worst, its, calls, ev in rows)
    ratio = medians["sola"] / base
    sola_calls = rows[-1][4]
    budget_us = (2 * base - base * sola_calls / rows[0][4]) / sola_calls * 1e6
    kernel_us = vectorised_decode_monitor_us(round(running))
    body = (
        "## SOLA's scheduling overhead in the replay (issue 15)\n\n"
        + header(command_line())
        + "- Instance: `instances/paper/azure-conv-infermax.yaml` (the full one-hour Azure 2023 "
        "conversation trace, 19,366 requests, Llama-3-70B / 4×A100, M = 100K KVs, C = 16384) "
        "with `slo: {multiple: 5}`; `llmopt.replay()` wall time, median of "
        f"{args.repeat} runs, schedule tables built, no files written.\n"
        "- Target: SOLA under 2× sarathi's time. "
        + ("**Met**" if ratio < 2 else f"**Not met: {ratio:.1f}×**") + ".\n\n"
        "| policy | median | max | × sarathi | iterations | policy calls | per call "
        "(simulation included) | preemptions |\n"
        "|---|---|---|---|---|---|---|---|\n" + table + "\n\n"
        "Policy calls: how many times the replay asks the policy for a batch (the rest of the "
        "iterations are runs of decode-only iterations advanced in one step). Sarathi is asked "
        "more often than SOLA; the difference is the cost of a call. Every SOLA decision reads "
        f"the state of the running requests ({running:.0f} on average per iteration here) and "
        "of up to 32 waiting ones (TTFT and TPOT ratios, predicted remaining lengths, the "
        "peak-memory test) and sorts them, in Python. If the simulation cost SOLA's calls what "
        "a call costs sarathi (its own simple decision included), 2× sarathi's time would leave "
        f"SOLA about {budget_us:.0f} µs per decision (somewhat more, by what sarathi's decision "
        "costs). A "
        "numpy version of only the decode side of the monitor (ratios, predictions, eq 1's "
        f"slack and the ordering of {round(running)} decoders; `vectorised_decode_monitor_us`) "
        f"takes {kernel_us:.0f} µs a call on this machine, before the waiting requests, the "
        "strategy, the admission scan and the batch are formed: a vectorised SOLA in Python "
        "would still miss 2×; it needs the decision compiled (or the simulation's state kept "
        "in arrays a compiled kernel can read). What is already done: decode-only runs while "
        "no waiting request can start (also past arrivals when none could enter SOLA's "
        "window), the peak-memory test as an O(log n) query on a profile of the running "
        "requests, and predictions of the running requests redone every 16 finishes rather "
        "than at each one (at commit 06a08c8, before them, SOLA took 16.70 s against "
        "sarathi's 0.59 s here: one run each, 2026-11-25, nothing else running).\n"
    )
    publish(args.write_docs, "sola-overhead", body)


if __name__ == "__main__":
    main()
