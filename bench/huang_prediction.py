"""Output-length prediction (Huang et al. 2025, section 5.3): plan on predicted output lengths,
evaluate the plan on the actual ones. Prints markdown and the machine; writes
docs/benchmarks.md only with --write-docs.

For --instances random instances (the workload of bench/huang_table1.py) per max batch 1/2/4:
G* on the actual lengths (exact CP-SAT, proven), and the G, on the actual lengths, of the plans
SA (Algorithm 1) makes from

- the actual lengths (a perfect predictor);
- the actual lengths perturbed by a uniform ±2.5 / 5 / 10 % (the paper's Fig. 9 setting);
- the paper's own predictor: a Gaussian fitted per task class (mean and standard deviation of
  the class's actual lengths in the instance), one draw per request, rounded and clipped.

and, for max batch 1 (where the exact model is fast), the exact optimum of the predicted
instance evaluated on the actual lengths. Figures: mean G / G* in %.

Usage::

    python bench/huang_prediction.py [--requests 10] [--instances 10] [--time-limit 30]
        [--write-docs]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from _common import command_line, header, publish
from huang_table1 import instance

from llmopt.data.instance import Instance
from llmopt.problems.slo_priority import sa
from llmopt.problems.slo_priority.exact import solve_exact
from llmopt.problems.slo_priority.model import Batches, SloPriorityData, evaluate

PREDICTORS = ("actual", "±2.5 %", "±5 %", "±10 %", "class Gaussian")


def predicted(inst: Instance, how: str, rng: np.random.Generator) -> Instance:
    outs = inst.output_tokens.astype(float)
    if how == "actual":
        new = outs
    elif how.startswith("±"):
        e = float(how[1:].split()[0]) / 100
        new = outs * (1 + rng.uniform(-e, e, len(outs)))
    else:
        classes = [r.slo_class for r in inst.requests]
        new = outs.copy()
        for c in set(classes):
            idx = [k for k, x in enumerate(classes) if x == c]
            mu, sd = outs[idx].mean(), outs[idx].std()
            new[idx] = rng.normal(mu, sd, len(idx))
    new = np.clip(np.round(new), 2, 2048).astype(int)
    reqs = tuple(r.model_copy(update={"output_tokens": int(o)})
                 for r, o in zip(inst.requests, new, strict=True))
    return inst.with_requests(reqs)


def on_actual(actual: SloPriorityData, plan: Batches) -> float:
    return evaluate(actual, plan).g_per_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--instances", type=int, default=10)
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    lines = ["| max batch | proven G* | " + " | ".join(f"SA on {p}" for p in PREDICTORS)
             + " | exact on ±10 % |", "|---|---|" + "---|" * (len(PREDICTORS) + 1)]
    for b in (1, 2, 4):
        ratios: dict[str, list[float]] = {p: [] for p in (*PREDICTORS, "exact ±10 %")}
        proven = 0
        for r in range(args.instances):
            inst = instance(args.requests, b, seed=5000 + 100 * b + r)
            actual = SloPriorityData.from_instance(inst)
            best = sa.anneal(actual, seed=r)
            star = solve_exact(actual, best.batches, args.time_limit, workers=args.workers)
            proven += star.proven
            if star.g_per_s == 0:
                continue
            rng = np.random.default_rng(r)
            for p in PREDICTORS:
                pred = SloPriorityData.from_instance(predicted(inst, p, rng))
                plan = sa.anneal(pred, seed=r).batches
                ratios[p].append(on_actual(actual, plan) / star.g_per_s)
                if p == "±10 %" and b == 1:
                    ex = solve_exact(pred, plan, args.time_limit, workers=args.workers)
                    ratios["exact ±10 %"].append(on_actual(actual, ex.batches) / star.g_per_s)
        cells = [f"{100 * statistics.mean(ratios[p]):.1f} %" if ratios[p] else "—"
                 for p in (*PREDICTORS, "exact ±10 %")]
        lines.append(f"| {b} | {proven}/{args.instances} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    body = (header(command_line()) + f"\n{args.requests} requests per instance; mean G (on the "
            "actual lengths) of each plan over the proven optimum G*:\n\n" + "\n".join(lines)
            + "\n")
    publish(args.write_docs, "huang-prediction", body)


if __name__ == "__main__":
    main()
