"""Replay speed against a baseline checkout, interleaved (issue 12: "speed held or better").

Each round replays every chosen policy once with this checkout and once with the baseline (a
checkout of an earlier commit, e.g. ``git worktree add ../base 340aedd``), alternating which goes
first, each in a fresh process that loads the instance and then times ``replay()`` alone. A
shared machine's speed drifts by 2× over minutes, so only interleaved pairs compare; the table
gives the best time of each side over the rounds and the median of the per-round ratios
(new / baseline), and checks that both sides give the same makespan.

Usage::

    python bench/replay_ab.py --baseline ../base [--rounds 5] [--write-docs]
        [--instance instances/paper/azure-conv-infermax.yaml] [--policies vllm,sarathi,...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _common import ROOT, command_line, header, publish, require_data

TRACE = ROOT / "instances" / "paper" / "azure-conv-infermax.yaml"
GSM8K = ROOT / "instances" / "paper" / "gsm8k-llama65b.yaml"

ONE = """
import json, sys, time
from llmopt.data.instance import load_instance
try:
    from llmopt.policies.replay import replay
except ImportError:  # the pre-redesign layout
    from llmopt.instance import load_instance
    from llmopt.replay import replay
inst = load_instance(sys.argv[1])
t0 = time.perf_counter()
schedule = replay(inst, sys.argv[2])
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "makespan_ms": schedule.makespan_ms}))
"""


def run(tree: Path, instance: Path, policy: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", ONE, str(instance), policy], env=env,
                         capture_output=True, text=True, cwd=tree)
    if out.returncode != 0:
        raise SystemExit(f"{tree}: {policy}: {out.stderr.strip().splitlines()[-1]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, required=True, help="a checkout to compare with")
    ap.add_argument("--instance", type=Path, default=TRACE)
    ap.add_argument("--policies", default="vllm,sarathi,vllm-ef,evict-short,rank-org,rank-o")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--section", default="replay-ab")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    require_data(args.instance)
    policies = [p for p in args.policies.split(",") if p]
    rows = []
    for policy in policies:
        new_t, base_t, ratios = [], [], []
        for k in range(args.rounds):
            order = [("new", ROOT), ("base", args.baseline)]
            if k % 2:
                order.reverse()
            got = {side: run(tree, args.instance, policy) for side, tree in order}
            if abs(got["new"]["makespan_ms"] - got["base"]["makespan_ms"]) > 1e-6 * max(
                    1.0, got["base"]["makespan_ms"]):
                raise SystemExit(f"{policy}: makespans differ: {got}")
            new_t.append(got["new"]["seconds"])
            base_t.append(got["base"]["seconds"])
            ratios.append(new_t[-1] / base_t[-1])
        rows.append(f"| {policy} | {min(base_t):.3f} s | {min(new_t):.3f} s | "
                    f"{statistics.median(ratios):.2f} | {min(ratios):.2f}–{max(ratios):.2f} |")
        print(rows[-1], flush=True)
    base_rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.baseline,
                              capture_output=True, text=True).stdout.strip() or "?"
    body = (
        f"## Replay speed against the pre-redesign engines ({args.instance.name})\n\n"
        + header(command_line())
        + f"- Baseline: commit {base_rev} (the two engines before issue 12); each side in a "
        f"fresh process, `replay()` alone timed, {args.rounds} interleaved rounds; makespans "
        "equal on both sides.\n\n"
        "| policy | baseline (best) | one core (best) | median ratio new/baseline | "
        "ratio range |\n|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    publish(args.write_docs, args.section, body)


if __name__ == "__main__":
    main()
