"""The upper bound on SLO attainment (llmopt.problems.infermax.attainment) on random 12-request
instances: for each, whether it is proven optimal within the time limit, the bound, the best
schedule found, the best replay policy, and the time. Prints a markdown table and the machine;
writes nothing. Usage::

    python bench/attainment_bound.py [--instances 10] [--requests 12] [--time-limit 10]
        [--workers 2] [--rate 100] [--multiple 3] [--seed 0]
    python bench/attainment_bound.py --search 20 --feasibility 60 [--write-docs]

``--search S`` runs the list scheduling alone (``attainment_search.search_plan``) for up to S
seconds per instance: the most requests meeting their SLOs it finds, how late the others are,
and the time of one rollout. ``--feasibility S`` asks CP-SAT's whole model "can every request
meet its SLOs?" with S seconds and ``--workers``. Both write the section attainment-search.

Instances (seeded): Llama-2-7B/A100 profile, M = 600 KV tokens, C = 512, J = the number of
requests; input 8–128 and output 1–8 tokens (uniform), Poisson arrivals at ``--rate`` requests
per second (rounded to 1 µs), TTFT and TPOT targets ``--multiple`` times each request's latency
alone (``slo: {multiple, basis: each}``, SOLA's rule).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import command_line, header, publish, python_loop_s

from llmopt.data.instance import instance_from_mapping
from llmopt.problems.infermax.attainment_data import horizon_batches, prepare
from llmopt.problems.infermax.attainment_model import build_model, run_cpsat
from llmopt.problems.infermax.attainment_search import Knobs, rollout, search_plan
from llmopt.problems.workflows.attainment import attainment_bound


def random_instance(seed: int, n: int, rate_per_s: float, multiple: float):
    rng = np.random.default_rng(seed)
    inputs = rng.integers(8, 129, n)
    outputs = rng.integers(1, 9, n)
    gaps = rng.exponential(1000.0 / rate_per_s, n)
    arrivals = np.round(np.cumsum(gaps) - gaps[0], 3)
    return instance_from_mapping({
        "name": f"rand-{n}-{seed}", "model": "infermax-llama2-7b-a100",
        "system": {"clients": n, "kv_capacity": 600, "max_batch_tokens": 512},
        "requests": [{"id": f"r{k}", "input_tokens": int(inputs[k]),
                      "output_tokens": int(outputs[k]), "arrival_ms": float(arrivals[k])}
                     for k in range(n)],
        "slo": {"multiple": multiple, "basis": "each"}})


def search_rows(args) -> list[str]:
    """The list scheduling alone and CP-SAT's "can every request meet its SLOs?" per instance."""
    lines = ["| instance | search: met | late (µs) | rollout (ms) | search time (s) | "
             "CP-SAT: all met? | CP-SAT time (s) |", "|---|---|---|---|---|---|---|"]
    for seed in range(args.seed, args.seed + args.instances):
        inst = random_instance(seed, args.requests, args.rate, args.multiple)
        data = prepare(inst)
        chosen = [i for i in range(data.n) if data.kind[i] == "model"]
        knobs = Knobs(tuple(chosen), data.C, 1000)
        t0 = time.perf_counter()
        for _ in range(100):
            rollout(data, chosen, knobs)
        one_ms = (time.perf_counter() - t0) * 10
        search = ["—"] * 3
        if args.search:
            t0 = time.perf_counter()
            out = search_plan(data, chosen, args.search)
            search = [f"{out.met}/{len(chosen)}", f"{out.late * 1000 / data.unit:.1f}",
                      f"{time.perf_counter() - t0:.1f}"]
        answer, took = "—", "—"
        if args.feasibility:
            H = max(d for i in chosen if (d := data.deadline(i)) is not None)
            md, var = build_model(data, horizon_batches(data), H)
            md.clear_objective()
            md.add(sum(var["met"][i] for i in chosen) >= len(chosen))
            t0 = time.perf_counter()
            ending = run_cpsat(md, args.feasibility, args.workers).ending
            took = f"{time.perf_counter() - t0:.1f}"
            answer = {"optimal": "yes", "feasible": "yes", "infeasible": "no"}.get(
                ending, "no answer")
        lines.append(f"| {inst.name} | {search[0]} | {search[1]} | {one_ms:.2f} | {search[2]} "
                     f"| {answer} | {took} |")
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", type=int, default=10)
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rate", type=float, default=100.0, help="arrivals per second")
    ap.add_argument("--multiple", type=float, default=3.0,
                    help="SLO targets as this multiple of each request's latency alone")
    ap.add_argument("--seed", type=int, default=0, help="the first instance's seed")
    ap.add_argument("--search", type=float, default=0.0, metavar="S",
                    help="the list scheduling alone for up to S seconds per instance")
    ap.add_argument("--feasibility", type=float, default=0.0, metavar="S",
                    help="CP-SAT's whole model asked whether every SLO can be met")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    if args.search or args.feasibility:
        lines = [header(command_line()), "",
                 f"- Instances: {args.instances} × {args.requests} requests as below; late: "
                 "the requests the search misses, in total, on the model's clock; rollout: "
                 "one rollout from a fixed order (mean of 100)", "",
                 *search_rows(args)]
        publish(args.write_docs, "attainment-search", "\n".join(lines) + "\n")
        return
    loops = [python_loop_s()]
    rows = []
    for seed in range(args.seed, args.seed + args.instances):
        inst = random_instance(seed, args.requests, args.rate, args.multiple)
        t0 = time.perf_counter()
        bound = attainment_bound(inst, time_limit_s=args.time_limit, workers=args.workers)
        took = time.perf_counter() - t0
        rows.append((inst.name, bound, took))
        print(f"{inst.name}: {bound.status} {bound.met_best}/{bound.met_upper} "
              f"(policies {bound.heuristic_best}) in {took:.1f} s", flush=True)
    loops.append(python_loop_s())
    lines = [header(command_line()),
             f"- Instances: {args.instances} × {args.requests} requests, arrivals "
             f"{args.rate:g}/s, SLO targets {args.multiple:g}× the latency alone; time limit "
             f"{args.time_limit:g} s, {args.workers} CP-SAT workers", "",
             "| instance | status | met_upper | met_best | best policy | N | runtime_s |",
             "|---|---|---|---|---|---|---|"]
    for name, b, took in rows:
        policy = "—" if b.heuristic_best is None else f"{b.heuristic_best} ({b.heuristic_policy})"
        lines.append(f"| {name} | {b.status} | {b.met_upper} | {b.met_best} | {policy} | "
                     f"{b.batches or '—'} | {took:.2f} |")
    proven = [took for _, b, took in rows if b.status == "optimal"]
    lines += ["", f"{len(proven)}/{len(rows)} proven optimal"
              + (f", slowest proof {max(proven):.2f} s" if proven else "")
              + f". Machine speed at the time: a 10⁷-step Python loop took "
              f"{min(loops):.2f}–{max(loops):.2f} s (before and after)."]
    print("\n".join(lines), flush=True)
    publish(args.write_docs, "attainment-bound", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
