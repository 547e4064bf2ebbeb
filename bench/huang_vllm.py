"""Fig. 7 of Huang et al. 2025 in shape, on the simulation core: G (eq 2) of simulated
annealing's plan served as static batches in priority order, against the paper's baseline, vLLM's
continuous FCFS batching (policy ``huang-vllm``), on the same requests and predictor, for 4-10
requests and max batch 1, 2, 4.

Both schedules are replayed by the simulation core on the bilinear predictor mapped to iterations
(``llmopt/data/cost/bilinear.py``); G of each is n / Σ E2E over the replayed latencies
(``problems.workflows.slo_priority.replayed_g``). The model's G of the SA plan (what SA
optimized) is shown beside its replayed G. Workload: ``huang_table1.workload`` (a seeded
chat/code mix, the paper's SLOs, all requests at time 0 in a random order, which is the FCFS
order of the baseline); the maximum batch size is ``system.clients`` for both (vLLM's
``max_num_seqs``). Prints markdown; nothing is written.

Usage::

    python bench/huang_vllm.py [--instances 10] [--sizes 4 6 8 10] [--batches 1 2 4]
        [--exact]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from _common import command_line, header
from huang_table1 import instance

from llmopt.policies.replay import replay
from llmopt.problems.slo_priority import sa
from llmopt.problems.slo_priority.exact import solve_exact
from llmopt.problems.slo_priority.model import SloPriorityData, evaluate
from llmopt.problems.workflows.slo_priority import replay_plan, replayed_g

PAPER = "+0.3 % to +46.5 %"


def plan_dict(data: SloPriorityData, batches) -> dict:
    return {"problem": "slo-priority", "batches": [[data.ids[i] for i in b] for b in batches]}


def cell(n: int, max_batch: int, instances: int, exact: bool) -> dict:
    rows = []
    for k in range(instances):
        inst = instance(n, max_batch, seed=1000 * n + k)
        data = SloPriorityData.from_instance(inst)
        plan = sa.anneal(data, seed=0).batches
        row = {"sa_model": evaluate(data, plan).g_per_s,
               "sa_replayed": replayed_g(replay_plan(inst, plan_dict(data, plan)), inst),
               "vllm": replayed_g(replay(inst, "huang-vllm"), inst)}
        if exact:
            best = solve_exact(data, plan, 60.0, workers=2).batches
            row["opt_replayed"] = replayed_g(replay_plan(inst, plan_dict(data, best)), inst)
        rows.append(row)
    out = {"n": n, "batch": max_batch, "sa_model": statistics.fmean(r["sa_model"] for r in rows)}
    for key in ("sa_replayed", "vllm", "opt_replayed"):
        if key in rows[0]:
            out[key] = statistics.fmean(r[key].g_per_s for r in rows)
            out[f"{key}_met"] = statistics.fmean(r[key].n_met / n for r in rows)
            out[f"{key}_lat"] = statistics.fmean(r[key].total_ms / n for r in rows)
    ratios = [r["sa_replayed"].g_per_s / r["vllm"].g_per_s - 1 for r in rows
              if r["vllm"].g_per_s > 0]
    out["range"] = (min(ratios), max(ratios)) if ratios else None
    out["worse"] = sum(r["sa_replayed"].g_per_s < r["vllm"].g_per_s - 1e-12 for r in rows)
    out["instances"] = instances
    return out


def pct(x: float) -> str:
    return f"{x:+.1%}".replace("%", " %")


def table(cells: list[dict], exact: bool) -> str:
    head = ("| requests | max batch | G vLLM (replayed) | G SA (replayed) | G SA (model) | "
            + ("G optimum (replayed) | " if exact else "")
            + "SA vs vLLM: mean G | per instance (min … max) | instances SA < vLLM | "
            "attainment vLLM → SA | mean E2E vLLM → SA (s) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for c in cells:
        rng = c["range"]
        lines.append(
            f"| {c['n']} | {c['batch']} | {c['vllm']:.4f} | {c['sa_replayed']:.4f} | "
            f"{c['sa_model']:.4f} | "
            + (f"{c['opt_replayed']:.4f} | " if exact else "")
            + f"{pct(c['sa_replayed'] / c['vllm'] - 1) if c['vllm'] else 'n/a'} | "
            f"{f'{pct(rng[0])} … {pct(rng[1])}' if rng else 'n/a'} | "
            f"{c['worse']}/{c['instances']} | {c['vllm_met']:.0%} → {c['sa_replayed_met']:.0%} | "
            f"{c['vllm_lat'] / 1000:.1f} → {c['sa_replayed_lat'] / 1000:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", type=int, default=10, help="random instances per cell")
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 6, 8, 10])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--exact", action="store_true",
                    help="also replay the exact CP-SAT optimum of the model")
    args = ap.parse_args()
    t0 = time.perf_counter()
    cells = [cell(n, b, args.instances, args.exact) for b in args.batches for n in args.sizes]
    print(header(command_line()))
    print(f"G in requests/s, means over {args.instances} instances per cell; paper: {PAPER}\n")
    print(table(cells, args.exact))
    print(f"\n({time.perf_counter() - t0:.1f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
