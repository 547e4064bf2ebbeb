"""P||Cmax literature classes: how many instances `solve(..., "binpacking", "auto")` proves
optimal within a per-instance limit, beside the published figures.

The offline bin packing of Pang et al. (eqs 26–30) with loads in output tokens is the
identical-machines makespan problem P||Cmax, so the standard P||Cmax benchmark classes measure
its exact path. Instances are generated here from the classes' published descriptions (no
instance file is copied), one seed per instance, so optima are not those of the published files:

- classic (França et al. 1994; Frangioni et al. 2004; the 780-instance set of Dell'Amico et al.
  2008): n ∈ {10, 50, 100, 500, 1000}, m ∈ {5, 10, 25} with n > m (13 pairs), processing-time
  ranges [a, b] = [1, 100], [1, 1000], [1, 10000], 10 instances per cell, two families:
  ``U``  uniform: p ~ U[a, b];
  ``NU`` non-uniform: 98 % of the jobs ~ U[0.9 (b − a), b], the remaining 2 % (round(0.02 n))
         ~ U[a, 0.2 (b − a)].
- lawrinenko (Lawrinenko 2017; Walter & Lawrinenko 2020), few jobs per machine: n/m ∈ {2, 2.25,
  2.5, 2.75, 3}, seven distributions: 1 U[1, 100], 2 U[20, 100], 3 U[50, 100], 4 N(100, 20),
  5 N(100, 50), 6 U[n, 4n], 7 N(4n, n) (normal draws rounded and clipped to ≥ 1). The (n, m)
  grid is read off the public instance names: m = c·k for the ratio's step c (2: m = 10k,
  n = 20k; 2.25: m = 8k, n = 18k; 2.5: m = 8k, n = 20k; 2.75: m = 8k, n = 22k; 3: m = 6k,
  n = 18k), k = 1..10, one instance per (class, ratio, k) and seed.

Each instance is solved once (one at a time) through the public ``llmopt.solve`` with the
given limit; the time is the wall clock of that call. Per-instance rows go to a JSON-lines file
(``--out``); the table goes to stdout and, with ``--write-docs``, to the ``pcmax-classes``
section of docs/benchmarks.md.

Usage::

    python bench/pcmax_classes.py --set classic --limit 60 --out /tmp/classic.jsonl
    python bench/pcmax_classes.py --set lawrinenko --limit 60 --seeds 2 --write-docs
    python bench/pcmax_classes.py --table-only --out /tmp/classic.jsonl --write-docs
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from _common import ROOT, header, publish

from llmopt.data.instance import instance_from_mapping
from llmopt.problems.api import solve

CLASSIC_PAIRS = [(10, 5)] + [(n, m) for n in (50, 100, 500, 1000) for m in (5, 10, 25)]
RANGES = {1: (1, 100), 2: (1, 1000), 3: (1, 10000)}
LAW_RATIOS = {"2": (20, 10), "2.25": (18, 8), "2.5": (20, 8), "2.75": (22, 8), "3": (18, 6)}

# Published figures (instances proven optimal) quoted beside ours; see docs/benchmarks.md for
# the sources and their machines and limits.
PUBLISHED_CLASSIC = ("best exact methods published in 2025: 744–758 of 780 proven within "
                     "500 s (issue 13's survey)")


def uniform(rng: np.random.Generator, n: int, a: int, b: int) -> list[int]:
    return [int(x) for x in rng.integers(a, b + 1, n)]


def non_uniform(rng: np.random.Generator, n: int, a: int, b: int) -> list[int]:
    """Frangioni et al. 2004: 98 % of the jobs in [0.9 (b − a), b], 2 % in [a, 0.2 (b − a)]."""
    small = round(0.02 * n)
    big = [int(x) for x in rng.integers(int(0.9 * (b - a)), b + 1, n - small)]
    low = [int(x) for x in rng.integers(a, max(a, int(0.2 * (b - a))) + 1, small)]
    return big + low


def classic_instances(seeds: int):
    for family in ("U", "NU"):
        for rid, (a, b) in RANGES.items():
            for n, m in CLASSIC_PAIRS:
                for s in range(seeds):
                    rng = np.random.default_rng([13, family == "NU", rid, n, m, s])
                    gen = uniform if family == "U" else non_uniform
                    yield (f"{family}_{rid}_{n:04d}_{m:02d}_{s}", f"{family} [{a},{b}]",
                           gen(rng, n, a, b), m)


def lawrinenko_weights(rng: np.random.Generator, cls: int, n: int) -> list[int]:
    if cls in (1, 2, 3):
        lo = {1: 1, 2: 20, 3: 50}[cls]
        return uniform(rng, n, lo, 100)
    if cls == 6:
        return uniform(rng, n, n, 4 * n)
    mu, sigma = {4: (100, 20), 5: (100, 50), 7: (4 * n, n)}[cls]
    return [max(1, round(float(x))) for x in rng.normal(mu, sigma, n)]


def lawrinenko_instances(seeds: int):
    for cls in range(1, 8):
        for ratio, (step_n, step_m) in LAW_RATIOS.items():
            for k in range(1, 11):
                n, m = step_n * k, step_m * k
                for s in range(seeds):
                    rng = np.random.default_rng([17, cls, int(float(ratio) * 100), k, s])
                    yield (f"L{cls}_r{ratio}_n{n}_m{m}_{s}", f"class {cls}",
                           lawrinenko_weights(rng, cls, n), m)


def as_instance(name: str, weights: list[int], machines: int):
    return instance_from_mapping({
        "name": name, "model": "pang-llama65b-ascend8", "system": {"clients": machines},
        "requests": [{"id": f"j{i}", "input_tokens": 1, "output_tokens": w}
                     for i, w in enumerate(weights)],
    })


def run_one(name: str, group: str, weights: list[int], machines: int, limit: float) -> dict:
    inst = as_instance(name, weights, machines)
    t0 = time.perf_counter()
    r = solve(inst, "binpacking", "auto", time_limit_s=limit)
    elapsed = time.perf_counter() - t0
    loads = [0] * machines
    for w, rid in zip(weights, (f"j{i}" for i in range(len(weights))), strict=True):
        loads[r.data["assignment"][rid]] += w
    lb = r.data.get("lower_bound", {})
    return {"name": name, "group": group, "n": len(weights), "m": machines,
            "status": r.status, "time_s": round(elapsed, 4), "makespan": max(loads),
            "bound": lb.get("tokens"), "bound_name": lb.get("name")}


def table(rows: list[dict]) -> str:
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["group"], []).append(row)
    lines = ["| class | instances | proven optimal | median time to proof | max time to proof "
             "| not proven: max gap | closed by (bound name: count) |",
             "|---|---|---|---|---|---|---|"]
    for group, rs in [*groups.items(), ("all", rows)]:
        proven = [r for r in rs if r["status"] == "optimal"]
        times = [r["time_s"] for r in proven]
        gaps = [(r["makespan"] - r["bound"]) / r["makespan"] for r in rs
                if r["status"] != "optimal" and r["bound"] is not None]
        names: dict[str, int] = {}
        for r in proven:
            names[r["bound_name"]] = names.get(r["bound_name"], 0) + 1
        closed = ", ".join(f"{k}: {v}" for k, v in sorted(names.items(), key=lambda kv: -kv[1]))
        lines.append(
            f"| {group} | {len(rs)} | {len(proven)} | "
            f"{statistics.median(times) if times else float('nan'):.3f} s | "
            f"{max(times) if times else float('nan'):.3f} s | "
            f"{f'{max(gaps):.3%}' if gaps else '—'} | {closed if group != 'all' else ''} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=("classic", "lawrinenko"), default="classic")
    ap.add_argument("--limit", type=float, default=60.0, help="time limit per instance (s)")
    ap.add_argument("--seeds", type=int, default=10, help="instances per cell")
    ap.add_argument("--only", default="", help="run only instances whose name contains this")
    ap.add_argument("--every", type=int, default=1,
                    help="run every N-th generated instance only (a sample of every class)")
    ap.add_argument("--out", type=Path, help="JSON-lines file of per-instance rows (appended; "
                    "instances already in it are skipped)")
    ap.add_argument("--table-only", action="store_true",
                    help="do not solve: build the table from the rows in --out")
    ap.add_argument("--note", action="append", default=[],
                    help="a line to add under the table's header (repeatable), e.g. the command "
                    "and commit that measured the rows of a --table-only run")
    ap.add_argument("--write-docs", action="store_true",
                    help="write the table into docs/benchmarks.md (section pcmax-<set>)")
    args = ap.parse_args()

    done: dict[str, dict] = {}
    if args.out and args.out.exists():
        for line in args.out.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["name"]] = row
    rows = [r for r in done.values() if args.only in r["name"]]  # (--every applies to new runs)
    if not args.table_only:
        gen = classic_instances if args.set == "classic" else lawrinenko_instances
        for index, (name, group, weights, m) in enumerate(gen(args.seeds)):
            if index % args.every or args.only not in name or name in done:
                continue
            row = run_one(name, group, weights, m, args.limit)
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.out:
                with args.out.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
    body = table(rows)
    publish(args.write_docs, f"pcmax-{args.set}", section_text(args, body, len(rows)))


def section_text(args: argparse.Namespace, body: str, count: int) -> str:
    title = ("P||Cmax classic classes (França et al. 1994, Frangioni et al. 2004)"
             if args.set == "classic" else "P||Cmax hard classes (Lawrinenko 2017)")
    return (f"## {title}\n\n" + header(_without_notes())
            + f"- {count} generated instances"
            + (f" (every {args.every}th of the generated grid)" if args.every > 1 else "")
            + f", per-instance limit {args.limit:g} s, "
            "one solve at a time; times are wall clock of `llmopt.solve` (noisy: the 2-core "
            "machine was shared).\n" + "".join(f"- {note}\n" for note in args.note)
            + "\n" + body + "\n")


def _without_notes() -> str:
    """The command line without its ``--note`` values (they are printed as lines of their own)."""
    argv = sys.argv[1:]
    kept = [a for i, a in enumerate(argv)
            if a != "--note" and not (i > 0 and argv[i - 1] == "--note")]
    return "python " + " ".join([os.path.relpath(sys.argv[0], ROOT), *kept])


if __name__ == "__main__":
    main()
