"""SCLS batching and offloading (Cheng et al. 2024, Algorithm 1, eqs 10–11) against exact
answers. Prints markdown and the machine; writes docs/benchmarks.md only with --write-docs.

1. Batching: ``--pools`` random pools of 8–40 requests (seeded). For each, the DP of Algorithm 1,
   the exact CP-SAT counts model (all partitions, :func:`llmopt.problems.scls.partition.
   counts_model`) and, up to 9 requests, brute force over every partition; on the 40-request
   pools also the weaker assignment model. Does the DP's contiguity lose optimality?
   Scaling: pools of ``--large`` requests, DP and the counts model.
   Batching ablation: pools of one period at 20 requests/s (Γ · 20: 120 requests for the ζ rule,
   60 for Algorithm 2), ShareGPT-like lengths, S = 128: fixed-size FCFS batches (SO's batching),
   the DP with PM's size limit (16 / 12) and the full DP (AB), on one slice, no replay.
2. Offloading: ``--periods`` periods of 60–200 requests batched by the DP under Algorithm 2's
   memory rule, offloaded to ``--instances`` empty workers by max-min (eq 11) and by the exact
   P||Cmax assignment (llmopt.problems.pang.binpacking, 1 ms units): the gap of max-min.

Pools: input lengths uniform on 1–1024 (a third), lognormal ShareGPT-like (median 200, clipped
to 1–1024, a third) or drawn from five values (ties, a third); S from {16, 128, 512}; memory rule
eq 9 with ζ (the profile's) or Algorithm 2, alternating. Usage::

    python bench/scls_partition.py [--pools 200] [--periods 100] [--instances 4]
        [--time-limit 10] [--workers 1] [--large 100 400 1000] [--seed 0] [--write-docs]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from _common import command_line, docs_parser, header, publish, python_loop_s

from llmopt.data.cost import load_profile
from llmopt.problems.scls.offload import compare_with_exact
from llmopt.problems.scls.partition import (
    BRUTE_MAX,
    Pool,
    brute_force,
    dp_batches,
    fcfs_batches,
    solve_pool,
)

PROFILE = "scls-llama2-13b-a100"


def lengths_for(rng: np.random.Generator, n: int, kind: int) -> np.ndarray:
    if kind == 0:
        return rng.integers(1, 1025, n)
    if kind == 1:
        return np.clip(np.round(rng.lognormal(np.log(200), 1.0, n)), 1, 1024).astype(int)
    return rng.choice([10, 64, 300, 700, 1024], n)


def main() -> None:
    ap = docs_parser(__doc__)
    ap.formatter_class = argparse.RawDescriptionHelpFormatter
    ap.add_argument("--pools", type=int, default=200)
    ap.add_argument("--periods", type=int, default=100)
    ap.add_argument("--instances", type=int, default=4, help="workers for the offloading")
    ap.add_argument("--time-limit", type=float, default=10.0, help="per CP-SAT solve (s)")
    ap.add_argument("--workers", type=int, default=1, help="CP-SAT threads")
    ap.add_argument("--large", type=int, nargs="*", default=[100, 400, 1000],
                    help="pool sizes of the scaling check (3 pools each, Algorithm 2, S = 128)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    loops = [python_loop_s()]
    hf = load_profile(PROFILE)
    ds = hf.model_copy(update={"memory_rule": "deepspeed"})
    rng = np.random.default_rng([args.seed, 0])  # one stream per part: parts independent

    rows = []
    for k in range(args.pools):
        n = int(rng.integers(8, 41))
        profile = hf if k % 2 == 0 else ds
        s = int(rng.choice([16, 128, 512]))
        pool = Pool.of(lengths_for(rng, n, k % 3), profile, s)
        t0 = time.perf_counter()
        dp = pool.total_ms(dp_batches(pool))
        dp_s = time.perf_counter() - t0
        exact = solve_pool(pool, "cpsat", args.time_limit, workers=args.workers)
        brute = brute_force(pool)[0] if n <= BRUTE_MAX else None
        assignment = (solve_pool(pool, "cpsat", args.time_limit, workers=args.workers,
                                 formulation="assignment") if n == 40 else None)
        rows.append({"n": n, "rule": profile.memory_rule, "S": s, "dp": dp, "dp_s": dp_s,
                     "exact": exact.objective, "status": exact.status,
                     "exact_s": exact.runtime_s, "brute": brute,
                     "batches": len(exact.data["batches"]),
                     "assign_status": assignment.status if assignment else None,
                     "assign_s": assignment.runtime_s if assignment else None})
        r = rows[-1]
        if r["status"] != "optimal" or abs(dp - r["exact"]) > 1e-6 * dp:
            print(f"pool {k}: n={n} {profile.memory_rule} S={s} dp {dp:.6f} exact "
                  f"{r['exact']:.6f} ({r['status']})", flush=True)

    proven = [r for r in rows if r["status"] == "optimal"]
    equal = [r for r in proven if abs(r["dp"] - r["exact"]) <= 1e-6 * r["dp"]]
    worse = [r for r in proven if r["dp"] > r["exact"] * (1 + 1e-6)]
    brute_rows = [r for r in rows if r["brute"] is not None]
    brute_ok = [r for r in brute_rows if abs(r["brute"] - r["dp"]) <= 1e-6 * r["dp"]
                and abs(r["brute"] - r["exact"]) <= 1e-6 * r["dp"]]
    forty = [r for r in rows if r["n"] == 40]
    assign_rows = [r for r in forty if r["assign_status"] is not None]

    large = []
    rng = np.random.default_rng([args.seed, 1])
    for n in args.large:
        for kind in range(3):
            for profile in (hf, ds):
                pool = Pool.of(lengths_for(rng, n, kind), profile, 128)
                t0 = time.perf_counter()
                dp = pool.total_ms(dp_batches(pool))
                dp_s = time.perf_counter() - t0
                exact = solve_pool(pool, "cpsat", args.time_limit, workers=args.workers)
                large.append((n, profile.memory_rule, dp, dp_s, exact))

    ablation: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    rng = np.random.default_rng([args.seed, 2])
    for _ in range(20):
        for profile, n, size in ((hf, 120, 16), (ds, 60, 12)):
            lengths = lengths_for(rng, n, 1)
            free = Pool.of(lengths, profile, 128)
            limited = Pool.of(lengths, profile, 128, max_size=size)
            for name, pool, batches in (
                    (f"FCFS, {size} per batch (SO)", free, fcfs_batches(free, size)),
                    (f"DP, at most {size} (PM)", limited, dp_batches(limited)),
                    ("DP (AB)", free, dp_batches(free))):
                pads = sum(int((pool.lengths[b].max() - pool.lengths[b]).sum())
                           for b in batches)
                ablation.setdefault((profile.memory_rule, name), []).append(
                    (pool.total_ms(batches) / n, n / len(batches), pads / n))

    periods = []
    rng = np.random.default_rng([args.seed, 3])
    for _ in range(args.periods):
        n = int(rng.integers(60, 201))
        pool = Pool.of(lengths_for(rng, n, int(rng.integers(0, 3))), ds, 128)
        times = [pool.batch_ms(b) for b in dp_batches(pool)]
        periods.append(compare_with_exact(times, args.instances))
    loops.append(python_loop_s())

    def q(values: list[float], p: float) -> float:
        return float(np.quantile(values, p)) if values else float("nan")

    exact_s = [r["exact_s"] for r in rows]
    lines = [header(command_line()),
             f"- Batching: {len(rows)} pools of 8–40 requests ({PROFILE}; eq 9 with ζ and "
             f"Algorithm 2 alternating; S ∈ {{16, 128, 512}}); CP-SAT counts model, "
             f"{args.workers} thread(s), time limit {args.time_limit:g} s", "",
             "| check | result |", "|---|---|",
             f"| exact (counts) proven optimal | {len(proven)}/{len(rows)} |",
             f"| DP total = exact optimum (within 1 ppm) | {len(equal)}/{len(proven)} |",
             f"| DP worse than the exact optimum | {len(worse)} |",
             f"| brute force (≤ {BRUTE_MAX} requests) = DP = exact | "
             f"{len(brute_ok)}/{len(brute_rows)} |",
             f"| exact runtime: median / p95 / max | {q(exact_s, 0.5):.3f} / "
             f"{q(exact_s, 0.95):.3f} / {max(exact_s):.3f} s |",
             f"| exact on the {len(forty)} pools of 40 requests: proven, slowest | "
             f"{sum(r['status'] == 'optimal' for r in forty)}/{len(forty)}, "
             f"{max((r['exact_s'] for r in forty), default=float('nan')):.3f} s |",
             f"| assignment model on the same: proven within {args.time_limit:g} s | "
             f"{sum(r['assign_status'] == 'optimal' for r in assign_rows)}/{len(assign_rows)}"
             f" (median {q([r['assign_s'] for r in assign_rows], 0.5):.2f} s) |",
             f"| DP runtime: max | {max(r['dp_s'] for r in rows) * 1000:.2f} ms |",
             f"| batches per pool: median / max | "
             f"{statistics.median(r['batches'] for r in rows):g} / "
             f"{max(r['batches'] for r in rows)} |"]
    if large:
        lines += ["", f"- Scaling: pools of {', '.join(map(str, args.large))} requests (three "
                  f"length distributions × both memory rules, S = 128)", "",
                  "| requests | rule | exact proven | DP = proven optimum | DP above CP-SAT's "
                  "incumbent | DP vs CP-SAT bound, max gap | exact max s | DP max s | "
                  "batches (max) |", "|---|---|---|---|---|---|---|---|---|"]
        for n in args.large:
            for rule in ("zeta", "deepspeed"):
                sel = [x for x in large if x[0] == n and x[1] == rule]
                same = sum(x[4].status == "optimal"
                           and abs(x[2] - x[4].objective) <= 1e-6 * x[2] for x in sel)
                above = sum(x[2] > x[4].objective * (1 + 1e-6) for x in sel)
                gap = max((x[2] - x[4].bound) / x[2] for x in sel if x[4].bound is not None)
                lines.append(
                    f"| {n} | {rule} | {sum(x[4].status == 'optimal' for x in sel)}/{len(sel)}"
                    f" | {same}/{sum(x[4].status == 'optimal' for x in sel)} | {above} | "
                    f"{max(gap, 0.0):.2%} | {max(x[4].runtime_s for x in sel):.3f} | "
                    f"{max(x[3] for x in sel):.3f} | "
                    f"{max(len(x[4].data['batches']) for x in sel)} |")
    lines += ["", "- Batching ablation (one slice of one period's pool, 20 pools each): serving "
              "time per request, batch size and pad tokens per request, means", "",
              "| memory rule | batching | ms per request | batch size | pad tokens per request |",
              "|---|---|---|---|---|"]
    for (rule, name), values in ablation.items():
        t, size, pad = (float(np.mean([v[k] for v in values])) for k in range(3))
        lines.append(f"| {rule} | {name} | {t:.1f} | {size:.1f} | {pad:.1f} |")
    gaps = [p.gap for p in periods]
    lines += ["", f"- Offloading: {len(periods)} periods of 60–200 requests, DP batches "
              f"(Algorithm 2, S = 128) onto {args.instances} empty workers; exact P||Cmax on "
              f"1 ms units", "", "| check | result |", "|---|---|",
              f"| exact assignment proven optimal | {sum(p.proven for p in periods)}/"
              f"{len(periods)} |",
              f"| max-min optimal (gap 0) | {sum(g == 0 for g in gaps)}/{len(periods)} |",
              f"| max-min gap: mean / p95 / max | {np.mean(gaps):.2%} / {q(gaps, 0.95):.2%} / "
              f"{max(gaps):.2%} |",
              f"| batches per period: median / max | "
              f"{statistics.median(p.batches for p in periods):g} / "
              f"{max(p.batches for p in periods)} |",
              "", f"Machine speed at the time: a 10⁷-step Python loop took "
              f"{min(loops):.2f}–{max(loops):.2f} s (before and after)."]
    publish(args.write_docs, "scls-partition", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
