"""The reference table of replayed schedules: for every bundled instance and every policy that
applies to it, the replay's metrics. Committed before the simulation core was redesigned
(issue 12); ``tests/test_replay_reference.py`` replays every row and compares.

Usage::

    python bench/replay_reference.py [--out tests/data/replay_reference.csv] [--no-trace]

Instances whose data are outside the repository (the full Azure trace in ../shared) are
included when present and marked, so that the test can skip them on a clone without them.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

from llmopt.data.cost import InferMaxProfile, PangLinearProfile
from llmopt.data.instance import load_instance
from llmopt.errors import LlmoptError
from llmopt.policies.infermax.configs import SCHEDULERS
from llmopt.policies.replay import replay

ROOT = Path(__file__).resolve().parent.parent
PD_POLICIES = ("baseline", "offline", "online", "iteration", "hybrid")
METRICS = ("makespan_ms", "evictions", "iterations", "ttft_mean_ms", "ttft_p50_ms",
           "ttft_p99_ms", "tpot_p50_ms", "e2e_p99_ms", "kv_tokens_max", "running_mean",
           "batch_size_mean", "utilization")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "replay_reference.csv")
    ap.add_argument("--no-trace", action="store_true", help="skip instances outside the repo")
    args = ap.parse_args()
    rows = []
    for path in sorted((ROOT / "instances").rglob("*.yaml")):
        external = "shared/data" in path.read_text()
        if external and args.no_trace:
            continue
        try:
            inst = load_instance(path)
        except LlmoptError as exc:
            print(f"skip {path}: {exc}")
            continue
        if isinstance(inst.profile, PangLinearProfile):
            policies = PD_POLICIES
        elif isinstance(inst.profile, InferMaxProfile):
            policies = tuple(SCHEDULERS)
        else:
            continue
        for policy in policies:
            t0 = time.perf_counter()
            try:
                m = replay(inst, policy).metrics()
            except LlmoptError as exc:
                print(f"{path.relative_to(ROOT)} {policy}: refused ({exc})")
                continue
            print(f"{path.relative_to(ROOT)} {policy}: {m['makespan_ms']:.3f} ms "
                  f"({time.perf_counter() - t0:.2f} s)", flush=True)
            rows.append({"instance": str(path.relative_to(ROOT)), "policy": policy,
                         "external_data": int(external), **{k: m[k] for k in METRICS}})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
