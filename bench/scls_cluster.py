"""The SCLS cluster replay (Cheng et al. 2024, section 5): the Fig. 15 ablation ladder, Fig. 17's
load imbalance, and the speed of a full-trace replay. Prints markdown and the machine; writes
docs/benchmarks.md (and the Gantt chart docs/img/scls-cluster-gantt.png) only with --write-docs.

Workload (section 5.1 settings): request lengths from the Azure 2023 conversation trace
(``../shared/data/traces/azure2023_conv_vidur.csv``, 19,366 requests; the bundled 500-request
sample ``instances/real/azure2023-conv-sample.csv`` when the full trace is absent), in trace
order, inputs and outputs cut at 1024 tokens as in the paper; Poisson arrivals (seeded) at
``--rate`` requests/s for ``--duration`` seconds (the paper sends for 10 minutes); profile
``scls-llama2-13b-a100`` (HF, ζ = 0.9), S = 128, Γ = 6 s, λ = 0.5, ``--instances`` instances.

1. The ladder SLS → SO → PM → AB → LB → SCLS (Fig. 15, 16): throughput, response time mean and
   p95, per-instance completion-time std, busy-time std, batch size, pad and invalid tokens; and
   beside it the paper's iteration-level baseline ILS (section 5.1: policy ``ils``, continuous
   batching with chunked prefill on the simulation core, at most 16 requests running per
   instance, round-robin), its metrics defined as the slice replays'
   (``llmopt.policies.slice.ils.section5_metrics``; its batch size is requests per iteration).
2. Fig. 17: completion-time std of SLS, SO, SCLS and ILS at several rates.
3. The full one-hour trace (its own arrival times and lengths, not cut) on 4 instances with SCLS:
   wall time of the replay (target < 10 s); skipped when the trace is absent.

Usage::

    python bench/scls_cluster.py [--rate 20] [--duration 600] [--instances 4] [--seed 0]
        [--rates 2.5 5 10 20] [--write-docs]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from _common import ROOT, command_line, docs_parser, header, publish, python_loop_s

from llmopt.data.instance import Instance, instance_from_mapping
from llmopt.policies.replay import replay
from llmopt.policies.slice import LADDER, replay_slices
from llmopt.policies.slice.ils import section5_metrics
from llmopt.report.slice_plot import plot_slices

PROFILE = "scls-llama2-13b-a100"
FULL = ROOT.parent / "shared" / "data" / "traces" / "azure2023_conv_vidur.csv"
SAMPLE = ROOT / "instances" / "real" / "azure2023-conv-sample.csv"
LIMIT = 1024   # section 5.1: inputs and generations cut at 1024 tokens
GANTT = ROOT / "docs" / "img" / "scls-cluster-gantt.png"


def lengths() -> tuple[pd.DataFrame, str]:
    path = FULL if FULL.exists() else SAMPLE
    df = pd.read_csv(path)
    return df, str(path.relative_to(ROOT.parent) if path == FULL else path.relative_to(ROOT))


def workload(df: pd.DataFrame, rate: float, duration_s: float, seed: int,
             instances: int = 4) -> Instance:
    """Poisson arrivals at ``rate`` for ``duration_s``; lengths in trace order (cycled), cut;
    ``instances`` model instances (read by ILS; the slice-level replays are given theirs)."""
    rng = np.random.default_rng(seed)
    n = max(int(rate * duration_s), 1)
    gaps = rng.exponential(1000.0 / rate, n)
    arrivals = np.concatenate([[0.0], np.cumsum(gaps[1:])])
    idx = np.arange(n) % len(df)
    inputs = np.minimum(df["num_prefill_tokens"].to_numpy()[idx], LIMIT)
    outputs = np.clip(df["num_decode_tokens"].to_numpy()[idx], 1, LIMIT)
    return instance_from_mapping({
        "name": f"azure-conv-{rate:g}rps", "model": PROFILE,
        "system": {"clients": 16, "instances": instances},
        "requests": [{"id": f"r{k}", "input_tokens": int(a), "output_tokens": int(b),
                      "arrival_ms": float(t)}
                     for k, (a, b, t) in enumerate(zip(inputs, outputs, arrivals,
                                                       strict=True))]},
        base_dir=ROOT / "instances")


def shown_max(replay, until_ms: float) -> int:
    """The largest batch starting before ``until_ms`` (the Gantt's height scale)."""
    bat = replay.batches
    return int(bat.loc[bat["start_ms"] < until_ms, "size"].max())


def main() -> None:
    ap = docs_parser(__doc__)
    ap.formatter_class = argparse.RawDescriptionHelpFormatter
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--duration", type=float, default=600.0, help="seconds of arrivals")
    ap.add_argument("--instances", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rates", type=float, nargs="+", default=[2.5, 5.0, 10.0, 20.0])
    args = ap.parse_args()
    loop_before = python_loop_s()
    df, source = lengths()
    w = args.instances
    lines = [header(command_line()),
             f"- Workload: lengths from `{source}` (trace order, inputs and outputs cut at "
             f"{LIMIT}), Poisson arrivals at {args.rate:g} req/s for {args.duration:g} s "
             f"(seed {args.seed}); `{PROFILE}`, S = 128, Γ = 6 s, λ = 0.5, {w} instances", ""]

    # 1. the ladder
    inst = workload(df, args.rate, args.duration, args.seed, w)
    lines += [f"### Fig. 15 ladder ({inst.num_requests} requests)", "",
              "| scheduler | throughput (req/s) | response mean (s) | response p95 (s) | "
              "completion std (s) | busy std (s) | batch size | pad tok/req | "
              "invalid tok/req | slices/req | early returns | replay (s) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    replays = {}
    for name in LADDER:
        t0 = time.perf_counter()
        r = replay_slices(inst, name, instances=w)
        wall = time.perf_counter() - t0
        replays[name] = r
        m = r.metrics()
        lines.append(
            f"| {name.upper()} | {m['throughput_rps']:.3f} | {m['response_mean_ms'] / 1e3:.1f} | "
            f"{m['response_p95_ms'] / 1e3:.1f} | {m['completion_std_ms'] / 1e3:.2f} | "
            f"{m['busy_std_ms'] / 1e3:.2f} | {m['batch_size_mean']:.1f} | "
            f"{m['pad_tokens_per_request']:.0f} | {m['invalid_tokens_per_request']:.0f} | "
            f"{m['slices_per_request']:.2f} | {m['early_return_share']:.1%} | {wall:.2f} |")
        print(lines[-1], flush=True)
    t0 = time.perf_counter()
    ils = section5_metrics(replay(inst, "ils"), w)
    wall = time.perf_counter() - t0
    lines.append(
        f"| ILS | {ils['throughput_rps']:.3f} | {ils['response_mean_ms'] / 1e3:.1f} | "
        f"{ils['response_p95_ms'] / 1e3:.1f} | {ils['completion_std_ms'] / 1e3:.2f} | "
        f"{ils['busy_std_ms'] / 1e3:.2f} | {ils['batch_size_mean']:.1f}* | 0 | 0 | – | – | "
        f"{wall:.2f} |")
    print(lines[-1], flush=True)
    lines += ["", "ILS: continuous batching (policy `ils`: SARATHI's decode-first hybrid batches, "
              "chunked prefill P = 512, first token from the first decode) at most 16 requests "
              "running per instance, round-robin; *batch size = requests per iteration (a slice "
              "counts its batch once for all its iterations)."]

    # 2. Fig. 17: load imbalance under various rates
    lines += ["", "### Fig. 17: instance completion-time std (s) under various rates", "",
              "| rate (req/s) | requests | SLS | SO | SCLS | ILS | SLS busy std | "
              "SCLS busy std |",
              "|---|---|---|---|---|---|---|---|"]
    for rate in args.rates:
        at = workload(df, rate, args.duration, args.seed, w)
        ms = {name: replay_slices(at, name, instances=w).metrics()
              for name in ("sls", "so", "scls")}
        ms["ils"] = section5_metrics(replay(at, "ils"), w)
        lines.append(f"| {rate:g} | {at.num_requests} | "
                     + " | ".join(f"{ms[n]['completion_std_ms'] / 1e3:.2f}"
                                  for n in ("sls", "so", "scls", "ils"))
                     + f" | {ms['sls']['busy_std_ms'] / 1e3:.2f} | "
                       f"{ms['scls']['busy_std_ms'] / 1e3:.2f} |")
        print(lines[-1], flush=True)

    # 3. the full one-hour trace
    lines += ["", "### Full one-hour Azure conversation trace, 4 instances, SCLS", ""]
    if FULL.exists():
        t0 = time.perf_counter()
        full = instance_from_mapping({"name": "azure2023-conv", "model": PROFILE,
                                      "system": {"clients": 16},
                                      "requests": {"trace": str(FULL), "format": "auto"}},
                                     base_dir=ROOT / "instances")
        load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        r = replay_slices(full, "scls", instances=4)
        wall = time.perf_counter() - t0
        m = r.metrics()
        lines.append(
            f"{full.num_requests} requests (their own arrivals and lengths, not cut; "
            f"max input {int(full.input_tokens.max())}): replay **{wall:.2f} s** (target "
            f"< 10 s; loading the trace {load_s:.2f} s); {int(m['batches'])} batches, "
            f"mean size {m['batch_size_mean']:.1f}, {m['slices_per_request']:.2f} slices per "
            f"request; throughput {m['throughput_rps']:.3f} req/s, makespan "
            f"{m['makespan_ms'] / 3.6e6:.2f} h (the trace's 5.4 req/s overload 4 instances of "
            f"this profile), completion std {m['completion_std_ms'] / 1e3:.2f} s.")
    else:
        lines.append(f"skipped: {FULL} is absent.")
    loop_after = python_loop_s()
    lines += ["", f"Machine speed at the time: a 10⁷-step Python loop took "
              f"{loop_before:.2f}–{loop_after:.2f} s (before and after)."]
    print("\n".join(lines[-3:]), flush=True)

    if args.write_docs:
        _, axes = plt.subplots(2, 1, figsize=(11, 7.5), layout="constrained", sharex=True)
        until = 240_000.0
        for ax, name in zip(axes, ("sls", "scls"), strict=True):
            plot_slices(replays[name], ax=ax, until_ms=until,
                        title=f"{name.upper()}: first {until / 1000:.0f} s of the ladder "
                              f"workload on {w} instances (box height = batch size, largest "
                              f"{int(shown_max(replays[name], until))})")
        axes[0].set_xlabel("")
        axes[1].set_xlim(0, until / 1000)
        GANTT.parent.mkdir(parents=True, exist_ok=True)
        axes[0].figure.savefig(GANTT, dpi=110)
        print(f"wrote {Path(GANTT).relative_to(ROOT)}")
    publish(args.write_docs, "scls-cluster", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
