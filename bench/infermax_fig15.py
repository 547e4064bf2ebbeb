"""Kim et al. 2025, section 5.1 / Fig. 15: the InferMax CSP on B = O = 4 identical requests,
I = 1 … 1024, M = max(2I, I + O − 1), Llama-2-7B/A100 profile, offline. For every point: the
proven optimum, its solve time, its evictions, and the heuristic schedulers beside it (vLLM,
vLLM-EF, SARATHI, SARATHI-EF). Writes the ``infermax-fig15`` sections of docs/reproduction.md
and docs/benchmarks.md, and Gantt charts docs/img/fig15-I<I>-<schedule>.png. Usage::

    python bench/infermax_fig15.py [--workers 1] [--time-limit 120]
"""

from __future__ import annotations

import argparse
import time

from _common import ROOT, command_line, header, publish, python_loop_s

from llmopt.data.instance import instance_from_mapping
from llmopt.policies.replay import replay
from llmopt.problems.infermax import csp as infermax_csp
from llmopt.problems.infermax.csp import replay_plan
from llmopt.problems.workflows.simulation import ENGINE
from llmopt.report import plot

REPRODUCTION_MD = ROOT / "docs" / "reproduction.md"
POINTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
SHOWN = ("vllm", "vllm-ef", "sarathi", "sarathi-ef")
CHARTS = (8, 128)


def fig15_instance(I: int, O: int = 4, B: int = 4):
    return instance_from_mapping({
        "name": f"fig15-I{I}", "model": "infermax-llama2-7b-a100",
        "system": {"clients": B, "kv_capacity": max(2 * I, I + O - 1),
                   "max_batch_tokens": 4096},
        "requests": [{"id": f"r{k}", "input_tokens": I, "output_tokens": O}
                     for k in range(B)]})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--write-docs", action="store_true",
                    help="write the results into the docs (default: print them only)")
    args = ap.parse_args()
    rows = []
    loops = [python_loop_s()]
    for I in POINTS:
        inst = fig15_instance(I)
        t0 = time.perf_counter()
        res = infermax_csp.solve(inst, "cpsat", args.time_limit, workers=args.workers,
                                 simulation=ENGINE)
        took = time.perf_counter() - t0
        heur = res.data["heuristics"]
        ef_best = min(v for k, v in heur.items() if k.endswith("-ef"))
        evict_best = min(v for k, v in heur.items() if not k.endswith("-ef"))
        rows.append({"I": I, "status": res.status, "opt": res.objective, "time": took,
                     "batches": res.data["batches"],
                     "evictions": res.data["metrics"]["evictions"],
                     "ef_best": ef_best, "evict_best": evict_best,
                     **{k: heur[k] for k in SHOWN}})
        print(f"I={I}: {res.status} {res.objective:.3f} ms in {took:.1f} s, "
              f"{rows[-1]['evictions']} evictions", flush=True)
        if I in CHARTS:
            optimal = replay_plan(inst, res.data["plan"], ENGINE)
            for name, sched in (("optimal", optimal), ("vllm", replay(inst, "vllm")),
                                ("vllm-ef", replay(inst, "vllm-ef"))):
                ax = plot.gantt_figure(inst, sched.segments, sched.iterations, policy=name,
                                       metrics=sched.metrics(), continuous=True)
                plot.save(ax, ROOT / "docs" / "img" / f"fig15-I{I}-{name}.png")
    loops.append(python_loop_s())
    _write(rows, args, loops)


def _write(rows: list[dict], args, loops: list[float]) -> None:
    head = header(command_line())
    lines = ["| I | M | optimum (ms) | evictions | vLLM | vLLM-EF | SARATHI | SARATHI-EF | "
             "optimum vs best EF | optimum vs best evicting |", "|" + "---|" * 10]
    for r in rows:
        lines.append(
            f"| {r['I']} | {max(2 * r['I'], r['I'] + 3)} | {r['opt']:.2f} | {r['evictions']} | "
            + " | ".join(f"{r[k]:.2f}" for k in SHOWN)
            + f" | {100 * (r['opt'] / r['ef_best'] - 1):+.1f}% "
            f"| {100 * (r['opt'] / r['evict_best'] - 1):+.1f}% |")
    publish(args.write_docs, "infermax-fig15", head + "\n" + "\n".join(lines) + "\n",
                   REPRODUCTION_MD)
    times = ["| I | status | N (batches) | solve time (s) |", "|---|---|---|---|"]
    for r in rows:
        times.append(f"| {r['I']} | {r['status']} | {r['batches']} | {r['time']:.1f} |")
    worst = max(r["time"] for r in rows)
    proven = sum(r["status"] == "optimal" for r in rows)
    body = (head + f"- CP-SAT workers: {args.workers}; time limit {args.time_limit:.0f} s\n\n"
            + "\n".join(times) + f"\n\n{proven}/{len(rows)} points proven optimal; slowest "
            f"{worst:.1f} s (target: every point under 10 s). Machine speed at the time: a "
            f"10⁷-step Python loop took {min(loops):.2f}–{max(loops):.2f} s (before and after).\n")
    publish(args.write_docs, "infermax-fig15", body)


if __name__ == "__main__":
    main()
