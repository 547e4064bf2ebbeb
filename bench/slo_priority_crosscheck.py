"""slo-priority (Huang et al. 2025) cross-checked on random instances (issue 30): CP-SAT
(parametric; Dinkelbach and the slot model up to 7 requests), the exhaustive search (up to
``EXHAUSTIVE_MAX_PLANS`` plans, i.e. up to 8 requests, 9 at max batch 1), SA, and the
validator's own enumeration of every order and batch split (up to 6 requests), on
``llmopt.experiments.crosscheck.random_slo_priority_instance`` (5-10 requests, max batch 1-4,
targets from loose to unmeetable, ties and rounding edges). Every answer goes through the
independent validator; proven optima must agree, no bound may be below another answer's plan.
Prints markdown; writes the section crosscheck-slo-priority of docs/benchmarks.md only with
--write-docs.

Usage::

    python bench/slo_priority_crosscheck.py [--instances 500] [--seed 0] [--time-limit 5]
        [--write-docs]
"""

from __future__ import annotations

import argparse
import collections
import time

from _common import command_line, header, publish

from llmopt.experiments.crosscheck import (
    EXHAUSTIVE_MAX_PLANS,
    cross_check,
    random_slo_priority_instance,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument("--time-limit", type=float, default=5.0, help="seconds per solve")
    ap.add_argument("--write-docs", action="store_true",
                    help="write the section crosscheck-slo-priority of docs/benchmarks.md")
    args = ap.parse_args()
    counts: collections.Counter = collections.Counter()
    findings: list[str] = []
    failing: set[int] = set()
    failing_by: collections.defaultdict[str, set[int]] = collections.defaultdict(set)
    sizes: collections.Counter = collections.Counter()
    windows = collections.Counter()
    t0 = time.perf_counter()
    for k in range(args.instances):
        seed = args.seed + k
        inst = random_slo_priority_instance(seed)
        sizes[inst.num_requests] += 1
        check = cross_check(inst, args.time_limit)
        for r in check.runs:
            name = r.label.split("/")[1]
            counts[(name, r.status)] += 1
            if r.checked_exactly:
                counts[(name, "confirmed by the validator's enumeration")] += 1
            cp = r.data.get("cpsat")
            if cp and name == "cpsat":
                windows[min(cp.get("rounding_windows", 0), 3)] += 1
                counts[("cpsat", f"clock 10^-{cp['clock_decimals']} ms")] += 1
        if check.findings:
            failing.add(seed)
        for f in check.findings:
            failing_by[f.split(":")[0].split(" and ")[0].removeprefix("slo-priority/")].add(seed)
        findings += [f"seed {seed}: {f}" for f in check.findings]
        if (k + 1) % 25 == 0:
            print(f"{k + 1}/{args.instances} instances, {len(failing)} with findings, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    seconds = time.perf_counter() - t0
    rows = [f"| {name} | {status} | {n:,} |" for (name, status), n in sorted(counts.items())]
    rejected = sum(1 for f in findings if "validator rejects" in f)
    answers = sum(n for (_, status), n in counts.items()
                  if not status.startswith(("confirmed", "clock")))
    body = (
        header(command_line())
        + f"- Instances: {args.instances} "
        "(`llmopt.experiments.crosscheck.random_slo_priority_instance`, seeds "
        f"{args.seed}–{args.seed + args.instances - 1}; requests per instance: "
        + ", ".join(f"{n}: {c}" for n, c in sorted(sizes.items()))
        + "); max batch 1–4, the paper's targets times one of 5, 1, 0.3, 0.1, 0.02, Table 2's "
        "predictor or its coefficients scaled at random, repeated requests, targets at "
        "exactly a reachable E2E/TTFT/TPOT or within 5e-7 ms of it.\n"
        f"- Answers per instance: SA, CP-SAT (1 worker), and up to 7 requests CP-SAT with "
        f"Dinkelbach and with the slot model; the exhaustive search up to "
        f"{EXHAUSTIVE_MAX_PLANS:,} plans. Time limit {args.time_limit:g} s per solve; wall time "
        f"{seconds / 60:.1f} min.\n"
        f"- **{answers:,} answers, {rejected} rejected by the validator, {len(findings)} "
        f"findings on {len(failing)} instances**"
        + ("" if not failing_by else " (instances with a finding on the answer of "
           + ", ".join(f"{k}: {len(v)}" for k, v in sorted(failing_by.items())) + ")")
        + ".\n"
        "- CP-SAT (parametric) sub-solves repeated because the rounded clock kept the bound "
        "open (rounding windows), instances: "
        + ", ".join(f"{'≥ 3' if w == 3 else w}: {c}" for w, c in sorted(windows.items()))
        + ".\n\n"
        "| answer | status | count |\n|---|---|---|\n" + "\n".join(rows) + "\n"
        + ("\nFindings:\n\n" + "\n".join(f"- {f}" for f in findings[:40]) + "\n"
           if findings else "")
    )
    publish(args.write_docs, "crosscheck-slo-priority", body)


if __name__ == "__main__":
    main()
