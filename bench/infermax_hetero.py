"""The InferMax CSP on 16 heterogeneous requests: the first 16 of the Azure conversation trace
sample, lengths scaled down to fit (input ÷ 16, output ÷ 8, at least 1), offline, Llama-2-7B
profile, M = a quarter of the KVs the requests would hold at once at their peak. Target: proven
optimal, or a reported gap, within 300 s. Writes the ``infermax-hetero`` section of
docs/benchmarks.md. Usage::

    python bench/infermax_hetero.py [--time-limit 300] [--workers 2]
"""

from __future__ import annotations

import argparse
import math
import time

import pandas as pd
from _common import ROOT, command_line, header, publish

from llmopt.data.instance import instance_from_mapping
from llmopt.problems.infermax import csp as infermax_csp


def hetero_instance(n: int = 16):
    trace = pd.read_csv(ROOT / "instances" / "real" / "azure2023-conv-sample.csv").head(n)
    reqs = [{"id": f"r{k}", "input_tokens": max(1, math.ceil(i / 16)),
             "output_tokens": max(1, math.ceil(o / 8))}
            for k, (i, o) in enumerate(zip(trace["num_prefill_tokens"],
                                           trace["num_decode_tokens"], strict=True))]
    peak = sum(r["input_tokens"] + r["output_tokens"] - 1 for r in reqs)
    M = max(max(r["input_tokens"] + r["output_tokens"] - 1 for r in reqs), peak // 4)
    return instance_from_mapping({
        "name": "azure16-scaled", "model": "infermax-llama2-7b-a100",
        "system": {"clients": n, "kv_capacity": M, "max_batch_tokens": 4096},
        "requests": reqs})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--write-docs", action="store_true",
                    help="write the results into the docs (default: print them only)")
    args = ap.parse_args()
    inst = hetero_instance()
    t0 = time.perf_counter()
    res = infermax_csp.solve(inst, "cpsat", args.time_limit, workers=args.workers)
    took = time.perf_counter() - t0
    best = min(res.data["heuristics"].items(), key=lambda kv: kv[1])
    gap = ("—" if res.bound is None
           else f"{100 * (res.objective - res.bound) / res.objective:.2f}%")
    lines = [
        f"- Instance: 16 requests, inputs {int(inst.input_tokens.min())}–"
        f"{int(inst.input_tokens.max())}, outputs {int(inst.output_tokens.min())}–"
        f"{int(inst.output_tokens.max())} tokens, M = {inst.system.kv_capacity}; CP-SAT, "
        f"{args.workers} workers, limit {args.time_limit:.0f} s",
        "",
        "| status | objective (ms) | bound (ms) | gap | best heuristic (ms) | N | time (s) |",
        "|---|---|---|---|---|---|---|",
        f"| {res.status} | {res.objective:.3f} | "
        f"{'—' if res.bound is None else f'{res.bound:.3f}'} | {gap} | {best[1]:.3f} "
        f"({best[0]}) | {res.data['batches']} | {took:.1f} |",
        "", "Notes: " + "; ".join(res.notes),
    ]
    print("\n".join(lines))
    publish(args.write_docs, "infermax-hetero", header(command_line()) + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
