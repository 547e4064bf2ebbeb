"""Time limits and memory on the largest bundled instances (issue 18 target: ``--time-limit``
honoured within 10 % + 2 s including model building, peak memory under 2 GB, for every problem
and solver). Each row is one ``llmopt solve`` in a fresh process: its wall time (Python start,
loading, heuristics, building, solving, writing), the solve's own ``runtime_s``, and the
process's peak resident memory.

Usage::

    python bench/time_limits.py [--time-limit 20] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _common import ROOT, command_line, header, publish, timed_process

GSM8K = ROOT / "instances" / "paper" / "gsm8k-llama65b.yaml"
HARD = ROOT / "instances" / "toy" / "hard-100x20.yaml"
SAMPLE = ROOT / "instances" / "real" / "azure2023-conv-sample.csv"

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


def azure_prefix(folder: Path, count: int) -> Path:
    """The first ``count`` requests of the bundled Azure sample on the section 6 profile."""
    path = folder / f"azure-{count}.yaml"
    path.write_text(f"name: azure-{count}\nmodel: infermax-llama3-70b-4xa100\n"
                    "system: {clients: 256, kv_capacity: 20000, max_batch_tokens: 16384}\n"
                    f"requests: {{trace: {SAMPLE}, format: azure, limit: {count}}}\n")
    return path


def run(instance: Path, problem: str, solver: str, extra: list[str], limit: float,
        out: Path) -> dict:
    log = out.parent / "solve.log"
    wall, code, rss_mb = timed_process(
        [sys.executable, "-m", "llmopt", "solve", str(instance), "--problem", problem,
         "--solver", solver, "--time-limit", str(limit), "--out", str(out), "--no-plot", *extra],
        log)
    if code != 0:
        raise SystemExit(f"{instance.name} {problem} {solver}: exit {code}\n{log.read_text()}")
    written = next(out.rglob(f"{problem}-{solver}.json"))
    sol = json.loads(written.read_text())
    written.unlink()
    notes = [n for n in sol.get("notes", []) if "not built" in n or "building" in n]
    return {"wall": wall, "runtime": sol["runtime_s"], "rss_mb": rss_mb,
            "status": sol["status"], "note": "model not built" if notes else ""}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--write-docs", action="store_true",
                    help="write the table into docs/benchmarks.md (section time-limits)")
    args = ap.parse_args()
    limit = args.time_limit
    rows = ["| instance | problem | solver | status | solve runtime (s) | process wall (s) | "
            "within 10 % + 2 s | peak RSS (MB) | note |", "|---|---|---|---|---|---|---|---|---|"]
    worst_over, worst_rss = 0.0, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for instance, problem, solver, extra in CASES:
            path = (azure_prefix(folder, int(str(instance).split("-")[1]))
                    if isinstance(instance, str) else instance)
            r = run(path, problem, solver, extra, limit, folder / "out")
            ok = r["wall"] <= 1.1 * limit + 2.0
            worst_over = max(worst_over, r["wall"] / limit)
            worst_rss = max(worst_rss, r["rss_mb"])
            label = solver + (" " + " ".join(extra) if extra else "")
            rows.append(f"| {path.stem} | {problem} | {label} | {r['status']} | "
                        f"{r['runtime']:.1f} | {r['wall']:.1f} | {'yes' if ok else 'no'} | "
                        f"{r['rss_mb']:.0f} | {r['note']} |")
            print(rows[-1], flush=True)
    body = ("<a id=\"time-limits\"></a>\n## Time limits and memory (issue 18)\n\n"
            + header(command_line())
            + f"- Each row: `llmopt solve INSTANCE --problem P --solver S --time-limit {limit:g} "
            "--no-plot` in a fresh process; the process wall time includes starting Python and "
            "writing the files (about 1.5 s). `azure-10`/`azure-24`: the first 10/24 requests of "
            "the bundled Azure sample on the section 6 profile (256 clients, M = 20K).\n\n"
            + "\n".join(rows)
            + f"\n\nLargest wall time / limit: {worst_over:.2f}; largest peak RSS "
            f"{worst_rss:,.0f} MB (targets: within 10 % + 2 s, under 2 GB).\n")
    publish(args.write_docs, "time-limits", body)


if __name__ == "__main__":
    main()
