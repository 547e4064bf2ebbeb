"""SLO-aware priority mapping (Huang et al. 2025): Table 1 in shape (exhaustive vs simulated
annealing vs the exact CP-SAT model), SA's gap to the proven optimum, and Fig. 7's improvement
of G over the input order. Prints markdown and the machine; writes docs/benchmarks.md (sections
huang-table1 and huang-sa-gap, and docs/img/huang_sa_gap.png) only with --write-docs.

Workload (our assumption; the paper's requests are not published): half chat requests
(ShareGPT-like: input lognormal median 150, output median 250 tokens) and half code requests
(Python-Code-23k-like: input median 120, output median 350), clipped to 8-1024 tokens each so
that input + output stays within the predictor's 2K tokens, in a random order; the paper's
SLOs (section 5.1): chat TTFT 10 s and TPOT 50 ms, code E2E 30 s; the paper's predictor
(models/huang-qwen25-7b-v100x2.yaml, Table 2).

1. Table 1: for 4/6/8/10 requests and max batch 1/2/4, one instance each (seed = n): the
   exhaustive search's time (cells whose number of plans exceeds --exhaustive-max are skipped),
   SA's time (median of 5 calls), the exact model's time and status.
2. Gap (--skip-gap leaves it out): --instances (10 requests, and max batch 1) or
   --instances-large (20 and 40 requests at max batch 2 and 4) random instances per size and
   max batch, --jobs of them at a time, each exact solve on --workers CP-SAT threads: SA
   (Metropolis, and line 36 as printed) against the exact model's proven optimum or, when the
   time limit stops it, its proven upper bound (the gap is then an upper bound on SA's gap);
   and, a lower bound on SA's gap, how far SA (Metropolis) is below the best plan found.
3. Fig. 7: G of SA and of the optimum over G of the input order in full batches (Algorithm 1's
   first start; our static stand-in for the paper's vLLM baseline), 4-10 requests.

Usage::

    python bench/huang_table1.py [--instances 10] [--instances-large 3] [--time-limit 60]
        [--exhaustive-max 4000000] [--sizes 10 20 40] [--batches 1 2 4] [--workers 2]
        [--jobs 1] [--skip-table1 | --skip-gap] [--write-docs]
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from math import comb
from pathlib import Path

import numpy as np
from _common import ROOT, command_line, header, publish, python_loop_s

from llmopt.data.instance import Instance, instance_from_mapping
from llmopt.problems.slo_priority import exhaustive, sa
from llmopt.problems.slo_priority.exact import solve_exact
from llmopt.problems.slo_priority.model import SloPriorityData, evaluate, max_size_cut

PROFILE = "huang-qwen25-7b-v100x2"
PAPER_TABLE1_S = {4: 0.0012, 6: 0.039, 8: 88.2, 10: 287}
PAPER_SA_S = {4: 0.00023, 6: 0.00032, 8: 0.00043, 10: 0.00048}


def workload(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    reqs = []
    for k in range(n):
        chat = k % 2 == 0
        med_in, med_out, sig = (150, 250, 0.8) if chat else (120, 350, 0.6)
        i = int(np.clip(round(rng.lognormal(np.log(med_in), sig)), 8, 1024))
        o = int(np.clip(round(rng.lognormal(np.log(med_out), sig)), 8, 1024))
        r: dict = {"id": f"{'chat' if chat else 'code'}-{k}", "input_tokens": i,
                   "output_tokens": o, "slo_class": "chat" if chat else "code"}
        reqs.append(r)
    order = rng.permutation(n)
    return [reqs[j] for j in order]


def instance(n: int, max_batch: int, seed: int) -> Instance:
    return instance_from_mapping({
        "name": f"huang-{n}-{max_batch}-{seed}", "model": PROFILE,
        "system": {"clients": max_batch}, "requests": workload(n, seed),
        "slo": {"classes": [{"name": "chat", "share": 0.5, "ttft_ms": 10000, "tpot_ms": 50},
                            {"name": "code", "share": 0.5, "e2e_ms": 30000}]}})


@cache
def ordered_partitions(n: int, b: int) -> int:
    """Plans the exhaustive search visits: ordered set partitions of n into blocks ≤ b."""
    if n == 0:
        return 1
    return sum(comb(n, s) * ordered_partitions(n - s, b) for s in range(1, min(b, n) + 1))


def sa_ms(data: SloPriorityData, calls: int = 5, **kw) -> float:
    times = []
    for c in range(calls):
        t0 = time.perf_counter()
        sa.anneal(data, seed=c, **kw)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def fcfs_g(data: SloPriorityData) -> float:
    order = list(range(data.n))
    sizes = max_size_cut(data.n, data.max_batch)
    pos, batches = 0, []
    for s in sizes:
        batches.append(tuple(order[pos:pos + s]))
        pos += s
    return evaluate(data, tuple(batches)).g_per_s


def table1(args: argparse.Namespace) -> tuple[str, list[dict]]:
    rows, lines = [], []
    for n in (4, 6, 8, 10):
        for b in (1, 2, 4):
            data = SloPriorityData.from_instance(instance(n, b, seed=n))
            plans = ordered_partitions(n, b)
            if plans <= args.exhaustive_max:
                t0 = time.perf_counter()
                ex = exhaustive.search(data)
                ex_s: float | None = time.perf_counter() - t0
                ex_g: float | None = ex.g_per_s
            else:
                ex_s = ex_g = None
            sa_t = sa_ms(data)
            sa_res = sa.anneal(data, seed=0)
            t0 = time.perf_counter()
            out = solve_exact(data, sa_res.batches, args.time_limit, workers=args.workers)
            cp_s = time.perf_counter() - t0
            if ex_g is not None and out.proven:
                assert abs(ex_g - out.g_per_s) <= 1e-9 * ex_g, (n, b, ex_g, out.g_per_s)
            row = {"n": n, "b": b, "plans": plans, "ex_s": ex_s, "sa_ms": sa_t, "cp_s": cp_s,
                   "proven": out.proven, "g": out.g_per_s, "sa_g": sa_res.g_per_s,
                   "fcfs_g": fcfs_g(data), "bound": out.bound_g_per_s}
            rows.append(row)
            lines.append(
                f"| {n} | {b} | {plans:,} | "
                f"{'skipped' if ex_s is None else f'{ex_s:.3g} s'} | {sa_t:.2f} ms | "
                f"{cp_s:.2f} s ({'optimal' if out.proven else 'not proven'}) | "
                f"{PAPER_TABLE1_S[n] if b == 1 else '—'} s / {PAPER_SA_S[n] if b == 1 else '—'}"
                " s |")
            print(lines[-1], flush=True)
    head = ("| requests | max batch | plans (ordered set partitions) | exhaustive | SA one "
            "call (median of 5) | exact CP-SAT | paper (batch 1): exhaustive / SA |\n"
            "|---|---|---|---|---|---|---|\n")
    return head + "\n".join(lines) + "\n", rows


def gap_one(n: int, b: int, r: int, time_limit: float, workers: int) -> dict:
    """One instance of the gap survey: SA with each acceptance rule against the exact model."""
    data = SloPriorityData.from_instance(instance(n, b, seed=1000 * n + r))
    res = {a: sa.anneal(data, seed=r, acceptance=a) for a in sa.ACCEPTANCE}
    sa_time = sa_ms(data, calls=1)
    best = max(res.values(), key=lambda x: x.g_per_s)
    t0 = time.perf_counter()
    out = solve_exact(data, best.batches, time_limit, workers=workers)
    cp_time = time.perf_counter() - t0
    ref = out.g_per_s if out.proven else out.bound_g_per_s
    return {"proven": out.proven, "cp_s": cp_time, "sa_ms": sa_time,
            "gaps": {a: 0.0 if ref == 0 else 1 - res[a].g_per_s / ref for a in sa.ACCEPTANCE},
            "below_best": 0.0 if out.g_per_s == 0 else 1 - res["metropolis"].g_per_s / out.g_per_s}


def gap(args: argparse.Namespace) -> tuple[str, list[dict]]:
    """The survey, cell by cell; ``--jobs`` instances at a time (each with ``--workers``
    CP-SAT threads)."""
    rows, lines = [], []
    with ProcessPoolExecutor(args.jobs) as pool:
        for n in args.sizes:
            for b in args.batches:
                count = args.instances if n <= 10 or b == 1 else args.instances_large
                runs = list(pool.map(gap_one, [n] * count, [b] * count, range(count),
                                     [args.time_limit] * count, [args.workers] * count))
                gaps = {a: [x["gaps"][a] for x in runs] for a in sa.ACCEPTANCE}
                proven = sum(x["proven"] for x in runs)
                cp_times = [x["cp_s"] for x in runs]
                sa_times = [x["sa_ms"] for x in runs]
                below = [x["below_best"] for x in runs]
                row = {"n": n, "b": b, "proven": proven, "instances": count,
                       "gaps": gaps, "below_best": below,
                       "cp_median_s": statistics.median(cp_times), "cp_max_s": max(cp_times),
                       "sa_median_ms": statistics.median(sa_times)}
                rows.append(row)
                m, lit = gaps["metropolis"], gaps["literal"]
                lines.append(
                    f"| {n} | {b} | {proven}/{count} | "
                    f"{statistics.mean(m):.1%} / {max(m):.1%} | "
                    f"{statistics.mean(below):.1%} / {max(below):.1%} | "
                    f"{statistics.mean(lit):.1%} / {max(lit):.1%} | "
                    f"{statistics.median(sa_times):.1f} ms | "
                    f"{statistics.median(cp_times):.2f} s / {max(cp_times):.2f} s |")
                print(lines[-1], flush=True)
    head = ("| requests | max batch | proven optimal | SA gap, Metropolis: mean / worst | "
            "Metropolis below the best plan found: mean / worst | SA gap, line 36 as printed: "
            "mean / worst | SA one call (median) | exact: median / max time |\n"
            "|---|---|---|---|---|---|---|---|\n")
    return head + "\n".join(lines) + "\n", rows


def fig7(rows: list[dict]) -> str:
    lines = ["| requests | max batch | G input order (req/s) | SA vs input order | optimum vs "
             "input order |", "|---|---|---|---|---|"]
    for r in rows:
        base = r["fcfs_g"]
        if base > 0:
            sa_imp, opt_imp = f"{r['sa_g'] / base - 1:+.1%}", f"{r['g'] / base - 1:+.1%}"
        else:
            sa_imp = opt_imp = "input order meets none"
        opt = opt_imp if r["proven"] else f"≥ {opt_imp} (not proven)"
        lines.append(f"| {r['n']} | {r['b']} | {base:.4f} | {sa_imp} | {opt} |")
    return "\n".join(lines) + "\n"


def plot(points: list[tuple[int, int, float, float, float, bool]], path: Path) -> None:
    """SA's (Metropolis) gap by size, one colour per max batch: the mean gap to the proven
    optimum or, where some instance was not proven (hollow markers), to the proven bound (an
    upper bound on SA's gap), solid; the worst, dotted; the mean gap to the best plan found (a
    lower bound on SA's gap), dashed, with the band between them shaded. ``points``:
    (requests, max batch, mean, worst, mean below the best found, all proven)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for b, marker, color in ((1, "o", "C0"), (2, "s", "C1"), (4, "^", "C2")):
        sel = sorted(p for p in points if p[1] == b)
        if not sel:
            continue
        xs = [p[0] for p in sel]
        upper = [100 * p[2] for p in sel]
        lower = [100 * p[4] for p in sel]
        ax.plot(xs, upper, color=color, label=f"max batch {b}, mean")
        ax.plot(xs, [100 * p[3] for p in sel], color=color, linestyle=":",
                label=f"max batch {b}, worst")
        ax.plot(xs, lower, color=color, linestyle="--", linewidth=0.8)
        ax.fill_between(xs, lower, upper, color=color, alpha=0.12)
        for p in sel:
            face = color if p[5] else "none"
            for y in (p[2], p[3]):
                ax.plot(p[0], 100 * y, marker=marker, color=color, markerfacecolor=face)
    ax.set_xlabel("requests")
    ax.set_ylabel("SA gap (%)")
    ax.set_title("SA (Algorithm 1, Metropolis) vs the exact optimum\n"
                 "hollow: not all proven, gap to the proven bound; dashed: gap to the best plan "
                 "found", fontsize=8)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def points_of(rows: list[dict]) -> list[tuple[int, int, float, float, float, bool]]:
    return [(r["n"], r["b"], statistics.mean(r["gaps"]["metropolis"]),
             max(r["gaps"]["metropolis"]), statistics.mean(r["below_best"]),
             r["proven"] == r["instances"]) for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", type=int, default=10,
                    help="per cell of 10 requests, and of max batch 1")
    ap.add_argument("--instances-large", type=int, default=3,
                    help="per cell of more than 10 requests at max batch > 1")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--exhaustive-max", type=int, default=4_000_000)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 20, 40])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4],
                    help="max batch sizes of the gap survey")
    ap.add_argument("--workers", type=int, default=2, help="CP-SAT threads per solve")
    ap.add_argument("--jobs", type=int, default=1,
                    help="gap-survey instances solved at a time (processes)")
    ap.add_argument("--skip-table1", action="store_true", help="only the gap survey")
    ap.add_argument("--skip-gap", action="store_true", help="only Table 1 and Fig. 7")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    speed = python_loop_s()
    head = (header(command_line())
            + f"- Python loop speed at the start: {speed:.2f} s per 10^7 iterations\n\n")
    if not args.skip_table1:
        t1, rows1 = table1(args)
        publish(args.write_docs, "huang-table1", head + "Table 1 in shape:\n\n" + t1
                + "\nFig. 7 in shape:\n\n" + fig7(rows1))
    if not args.skip_gap:
        g, rows2 = gap(args)
        body = (head + "SA's gap to the exact optimum (or to the proven bound when not "
                "proven):\n\n" + g)
        if args.write_docs:
            img = ROOT / "docs" / "img" / "huang_sa_gap.png"
            plot(points_of(rows2), img)
            body += "\n![SA gap by instance size](img/huang_sa_gap.png)\n"
        publish(args.write_docs, "huang-sa-gap", body)


if __name__ == "__main__":
    main()
