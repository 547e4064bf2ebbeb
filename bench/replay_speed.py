"""Replay speed: the PD-competition engine on gsm8k-llama65b (1319 requests, 200 clients) under
every policy. Writes the ``replay-pd`` section of docs/benchmarks.md. Usage::

    python bench/replay_speed.py [--repeat 5]
"""

from __future__ import annotations

import statistics

from _common import ROOT, command_line, docs_parser, header, publish, timed_runs

from llmopt.data.instance import load_instance
from llmopt.policies.replay import replay

POLICIES = ("baseline", "offline", "online", "iteration", "hybrid")


def main() -> None:
    ap = docs_parser(__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    inst = load_instance(ROOT / "instances" / "paper" / "gsm8k-llama65b.yaml")
    rows = []
    for policy in POLICIES:
        times, sched = timed_runs(lambda p=policy: replay(inst, p), args.repeat)
        med = statistics.median(times)
        its = len(sched.iterations)
        rows.append(f"| {policy} | {med:.3f} s | {max(times):.3f} s | {its:,} | "
                    f"{its / med:,.0f} | {len(sched.segments):,} |")
        print(rows[-1], flush=True)
    body = (
        "## Replay, PD competition (Pang et al. 2025)\n\n"
        + header(command_line())
        + f"- Instance: `instances/paper/gsm8k-llama65b.yaml` (1319 requests, 200 clients); "
        f"`llmopt.replay()` wall time over {args.repeat} runs, including the offline "
        "bin packing for `offline` and `hybrid` and building the schedule tables (not writing "
        "JSON or charts). Target: under 1 s.\n\n"
        "| policy | median | max | iterations | iterations/s | segments |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    publish(args.write_docs, "replay-pd", body)


if __name__ == "__main__":
    main()
