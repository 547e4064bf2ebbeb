"""Time limits and memory of every command that takes ``--time-limit`` (issues 18 and 30).

Target: a command ends within its time limit plus 10 % and a fixed overhead (``OVERHEAD_S``:
starting Python and loading llmopt, about 1.5–2 s, and writing the outputs), with peak memory
under 2 GB. Each row is one command in a fresh process: its wall time (Python start, loading,
heuristics, building, solving, replaying, writing), for a solve its own ``runtime_s``, and the
process's peak resident memory. Two tables:

- ``solvers``: every problem and solver on the largest bundled instances at ``--time-limit``;
- ``instances``: on every bundled instance (``instances/**/*.yaml``, sweeps aside) at
  ``--small-limit``: ``solve`` (the instance's default problem, and for the Pang family
  ``pd-competition`` in both formulations), ``bound`` and ``compare``; and the same solves at
  ``--heuristic-limit``, where the heuristic phase (the replays of the paper's policies, grid
  plans, greedy schedules) is nearly all the time there is.

A process that passes ``--kill-after`` times its limit plus 60 s, or ``--max-rss-mb`` of
resident memory, is killed and reported so (the machine is shared: a runaway command must not
take it down).

Usage::

    python bench/time_limits.py [--time-limit 20] [--small-limit 5] [--heuristic-limit 1]
                                [--tables solvers,instances] [--only REGEX] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _common import ROOT, command_line, header, publish

GSM8K = ROOT / "instances" / "paper" / "gsm8k-llama65b.yaml"
HARD = ROOT / "instances" / "toy" / "hard-100x20.yaml"
SAMPLE = ROOT / "instances" / "real" / "azure2023-conv-sample.csv"
OVERHEAD_S = 3.0  # Python start and imports (1.5–2 s on the 2-core VM) and writing the outputs

CASES = [  # instance, problem, solver, extra options
    (GSM8K, "binpacking", "auto", []),
    (GSM8K, "binpacking", "highs", []),
    (GSM8K, "binpacking", "cpsat", []),
    (HARD, "binpacking", "highs", []),
    (HARD, "binpacking", "cpsat", []),
    (GSM8K, "pd-competition", "auto", []),
    (GSM8K, "pd-competition", "highs", []),
    (HARD, "pd-competition", "auto", []),
    (HARD, "pd-competition", "highs", []),
    (HARD, "pd-competition", "highs", ["--formulation", "original"]),
    ("azure-10", "infermax-csp", "auto", []),
    ("azure-24", "infermax-csp", "auto", []),
    ("azure-24", "infermax-csp", "highs", []),
]


@dataclass
class Run:
    wall_s: float
    code: int | None  # None: killed by this script
    rss_mb: float
    killed: str = ""  # why it was killed


def within(wall_s: float, limit: float) -> bool:
    return wall_s <= 1.1 * limit + OVERHEAD_S


def rss_mb_now(pid: int) -> float:
    """The resident memory of a running process (Linux; 0 elsewhere)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    found = re.search(r"VmRSS:\s+(\d+) kB", status)
    return int(found.group(1)) / 1024 if found else 0.0


def watched_process(argv: list[str], log: Path, max_wall_s: float, max_rss_mb: float) -> Run:
    """Run ``argv`` with its output in ``log``, killing it past ``max_wall_s`` or
    ``max_rss_mb``; its wall time, exit code and own peak resident memory (via wait4)."""
    with log.open("w") as sink:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
        killed = ""
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            elapsed = time.perf_counter() - t0
            rss = rss_mb_now(proc.pid)
            if not killed and (elapsed > max_wall_s or rss > max_rss_mb):
                killed = (f"killed at {elapsed:.0f} s" if elapsed > max_wall_s
                          else f"killed at {rss:,.0f} MB")
                os.kill(proc.pid, signal.SIGKILL)
            time.sleep(0.05)
        wall = time.perf_counter() - t0
    code = None if killed else os.waitstatus_to_exitcode(status)
    return Run(wall, code, usage.ru_maxrss / 1024, killed)


def azure_prefix(folder: Path, count: int) -> Path:
    """The first ``count`` requests of the bundled Azure sample on the section 6 profile."""
    path = folder / f"azure-{count}.yaml"
    path.write_text(f"name: azure-{count}\nmodel: infermax-llama3-70b-4xa100\n"
                    "system: {clients: 256, kv_capacity: 20000, max_batch_tokens: 16384}\n"
                    f"requests: {{trace: {SAMPLE}, format: azure, limit: {count}}}\n")
    return path


def llmopt(*args: str) -> list[str]:
    return [sys.executable, "-m", "llmopt", *args]


def solve_row(instance: Path, args: list[str], limit: float, out: Path, guard) -> dict:
    """One ``llmopt solve``: its run, and the status and runtime of the file it wrote."""
    shutil.rmtree(out, ignore_errors=True)
    run = guard(llmopt("solve", str(instance), "--time-limit", f"{limit:g}", "--out", str(out),
                       "--no-plot", *args), limit)
    written = sorted(out.rglob("*.json"))
    sol = json.loads(written[0].read_text()) if written else {}
    notes = [n for n in sol.get("notes", []) if "not built" in n or "building" in n]
    return {"run": run, "status": sol.get("status", "—"),
            "runtime": sol.get("runtime_s"), "note": "model not built" if notes else ""}


def verdict(run: Run, limit: float) -> str:
    """yes / no against the target; a command that refuses the instance (exit 2: e.g. the
    PD-competition problem of an instance with arrivals) is judged on its time too."""
    if run.killed:
        return f"no ({run.killed})"
    if run.code not in (0, 2):
        return f"exit {run.code}"
    ok = "yes" if within(run.wall_s, limit) else "no"
    return ok if run.code == 0 else f"{ok} (refused, exit 2)"


def solvers_table(limit: float, folder: Path, guard) -> tuple[list[str], float, float]:
    rows = ["| instance | problem | solver | status | solve runtime (s) | process wall (s) | "
            f"within 10 % + {OVERHEAD_S:g} s | peak RSS (MB) | note |",
            "|---|---|---|---|---|---|---|---|---|"]
    worst_over = worst_rss = 0.0
    for instance, problem, solver, extra in CASES:
        path = (azure_prefix(folder, int(str(instance).split("-")[1]))
                if isinstance(instance, str) else instance)
        r = solve_row(path, ["--problem", problem, "--solver", solver, *extra], limit,
                      folder / "out", guard)
        run = r["run"]
        worst_over = max(worst_over, run.wall_s / limit)
        worst_rss = max(worst_rss, run.rss_mb)
        label = solver + (" " + " ".join(extra) if extra else "")
        runtime = "—" if r["runtime"] is None else f"{r['runtime']:.1f}"
        rows.append(f"| {path.stem} | {problem} | {label} | {r['status']} | {runtime} | "
                    f"{run.wall_s:.1f} | {verdict(run, limit)} | {run.rss_mb:.0f} | "
                    f"{r['note']} |")
        print(rows[-1], flush=True)
    return rows, worst_over, worst_rss


def bundled_instances(only: str | None) -> list[Path]:
    found = sorted(p for p in (ROOT / "instances").rglob("*.yaml") if "sweeps" not in p.parts)
    return [p for p in found if only is None or re.search(only, str(p.relative_to(ROOT)))]


def family_of(path: Path) -> str:
    from llmopt.data.instance import load_instance

    return load_instance(path).profile.family


def commands_for(path: Path, small: float, heuristic: float) -> list[tuple[str, list[str], float]]:
    """(label, arguments after the instance, time limit) of the commands run on ``path``."""
    solves: list[tuple[str, list[str]]] = [("solve", [])]
    if family_of(path) == "pang_linear":
        solves += [("solve pd-competition", ["--problem", "pd-competition"]),
                   ("solve pd-competition original",
                    ["--problem", "pd-competition", "--formulation", "original"])]
    rows = [(label, ["solve", *args], small) for label, args in solves]
    rows += [("bound", ["bound"], small), ("compare", ["compare"], small)]
    rows += [(label, ["solve", *args], heuristic) for label, args in solves]
    return rows


def instances_table(small: float, heuristic: float, only: str | None, folder: Path,
                    guard) -> tuple[list[str], float, float, int]:
    rows = ["| instance | command | time limit (s) | status | solve runtime (s) | "
            f"process wall (s) | within 10 % + {OVERHEAD_S:g} s | peak RSS (MB) | note |",
            "|---|---|---|---|---|---|---|---|---|"]
    worst_over = worst_rss = 0.0
    failed = 0
    out = folder / "out"
    for path in bundled_instances(only):
        for label, args, limit in commands_for(path, small, heuristic):
            if args[0] == "solve":
                r = solve_row(path, args[1:], limit, out, guard)
                run, status, runtime, note = r["run"], r["status"], r["runtime"], r["note"]
            else:
                shutil.rmtree(out, ignore_errors=True)
                extra = ["--out", str(out)] if args[0] == "compare" else []
                run = guard(llmopt(args[0], str(path), "--time-limit", f"{limit:g}", *extra),
                            limit)
                status, runtime, note = "—", None, ""
            ok = verdict(run, limit)
            failed += not ok.startswith("yes")
            worst_over = max(worst_over, run.wall_s / limit)
            worst_rss = max(worst_rss, run.rss_mb)
            shown = "—" if runtime is None else f"{runtime:.1f}"
            rows.append(f"| {path.relative_to(ROOT / 'instances')} | {label} | {limit:g} | "
                        f"{status} | {shown} | {run.wall_s:.1f} | {ok} | {run.rss_mb:.0f} | "
                        f"{note} |")
            print(rows[-1], flush=True)
    return rows, worst_over, worst_rss, failed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time-limit", type=float, default=20.0,
                    help="limit of the solvers table (s)")
    ap.add_argument("--small-limit", type=float, default=5.0,
                    help="limit of solve, bound and compare on every instance (s)")
    ap.add_argument("--heuristic-limit", type=float, default=1.0,
                    help="limit of the solves that leave time for the heuristics only (s)")
    ap.add_argument("--tables", default="solvers,instances",
                    help="comma-separated: solvers, instances")
    ap.add_argument("--only", help="instances table: only paths (under the repository) "
                                   "matching this regular expression")
    ap.add_argument("--kill-after", type=float, default=3.0,
                    help="kill a command past this many times its limit plus 60 s")
    ap.add_argument("--max-rss-mb", type=float, default=4096.0,
                    help="kill a command whose resident memory passes this")
    ap.add_argument("--write-docs", action="store_true",
                    help="write the tables into docs/benchmarks.md (section time-limits)")
    args = ap.parse_args()
    tables = set(args.tables.split(","))

    def guard(argv: list[str], limit: float) -> Run:
        with tempfile.NamedTemporaryFile(suffix=".log") as log:
            run = watched_process(argv, Path(log.name), args.kill_after * limit + 60.0,
                                  args.max_rss_mb)
            if run.code not in (0, None, 130):
                print(f"{' '.join(argv[2:])}: exit {run.code}\n{Path(log.name).read_text()}",
                      file=sys.stderr, flush=True)
        return run

    body = ("<a id=\"time-limits\"></a>\n## Time limits and memory (issues 18, 30)\n\n"
            + header(command_line())
            + "- Each row: one command in a fresh process; the process wall time includes "
            "starting Python, loading llmopt and writing the files (`--no-plot` for solves; "
            "compare writes its charts). The target is the time limit plus 10 % and "
            f"{OVERHEAD_S:g} s, and under 2 GB.\n")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if "solvers" in tables:
            rows, over, rss = solvers_table(args.time_limit, folder, guard)
            body += (f"\n### Every problem and solver at --time-limit {args.time_limit:g}\n\n"
                     "`azure-10`/`azure-24`: the first 10/24 requests of the bundled Azure "
                     "sample on the section 6 profile (256 clients, M = 20K).\n\n"
                     + "\n".join(rows)
                     + f"\n\nLargest wall time / limit: {over:.2f}; largest peak RSS "
                     f"{rss:,.0f} MB.\n")
        if "instances" in tables:
            rows, over, rss, failed = instances_table(args.small_limit, args.heuristic_limit,
                                                      args.only, folder, guard)
            body += (f"\n### Every bundled instance: solve, bound, compare at "
                     f"{args.small_limit:g} s, the heuristics at {args.heuristic_limit:g} s\n\n"
                     + "\n".join(rows)
                     + f"\n\nLargest wall time / limit: {over:.2f}; largest peak RSS "
                     f"{rss:,.0f} MB; {failed} row(s) off target.\n")
    publish(args.write_docs, "time-limits", body)


if __name__ == "__main__":
    main()
