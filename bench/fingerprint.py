"""A fingerprint of llmopt's behaviour, for refactors that must change none of it.

Through the command line (in process, so that the figures are what a user gets), for every
bundled instance: ``llmopt replay`` under every registered policy of its family (and, on small
instances made two-replica, under every router), ``llmopt solve`` of every problem of its
family with its default solver (and a few other deterministic solvers), the replay of each
solver's plan (``--policy plan``), ``llmopt validate`` of every file written, ``llmopt
compare`` on the small instances, and ``llmopt list --markdown``. Each output file is hashed
without the fields that measure time (``runtime_s`` and the like); the schedules' Parquet
tables byte for byte.

Usage::

    python bench/fingerprint.py --out /tmp/fp-before.json          # record
    python bench/fingerprint.py --check /tmp/fp-before.json        # compare with a record

A time-limited solve that does not finish may end differently on a loaded machine: record
twice (``--check`` of a second run against the first) to see which entries are not stable;
``--check`` names every entry that differs, is missing or is new. ``--max-requests`` skips the
large instances (default 2000: everything bundled but the full Azure trace).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmopt.cli import app  # noqa: E402
from llmopt.data.instance import load_instance  # noqa: E402
from llmopt.errors import LlmoptError  # noqa: E402

TIMING_KEYS = re.compile(r"(^|_)runtime(_s)?$|_runtime_s$|^elapsed")
SOLVE_MAX_REQUESTS = 40      # solves and compares run on instances up to this size
TIME_LIMIT_S = "10"
# deterministic solvers besides each problem's default (problem -> solvers)
EXTRA_SOLVERS = {"binpacking": ("heuristic",), "scls-batching": ("brute", "cpsat"),
                 "slo-priority": ("sa",)}
# two-replica variants: instance -> policies replayed under every router
ROUTED = {"quickstart": ("baseline", "online"), "slo-chat": ("vllm", "sarathi", "sola",
                                                             "vllm-v1"),
          "huang-chat-code": ("huang-vllm",)}
ROUTERS = ("round-robin", "least-outstanding-tokens", "shortest-queue", "most-free-memory")
# entries whose solver's answer depends on timing or threads (a time-limited MIP or CP-SAT
# search, CP-SAT's choice among optimal plans with several workers): differences are listed
# apart, as 'unstable', and do not fail the check
UNSTABLE = re.compile(r"solve (pd-competition|infermax-csp) auto|compare compare")


def strip_timing(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_timing(v) for k, v in value.items() if not TIMING_KEYS.search(str(k))}
    if isinstance(value, list):
        return [strip_timing(v) for v in value]
    return value


def digest(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()[:16]


def file_digest(path: Path) -> str:
    if path.suffix == ".json":
        return digest(json.dumps(strip_timing(json.loads(path.read_text())), sort_keys=True))
    if path.name.endswith(".parquet"):
        return digest(path.read_bytes())  # byte for byte (the JSON names its SHA-256 too)
    if path.suffix in (".md", ".csv"):
        text = re.sub(r"\d+(\.\d+)? s\)", "_ s)", path.read_text())  # runtimes in prose
        return digest(text)
    return "present"  # charts: drawn, not compared pixel by pixel


class Recorder:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.runner = CliRunner()
        self.entries: dict[str, str] = {}

    def cli(self, key: str, args: list[str], out: Path | None = None) -> list[Path]:
        """Run ``llmopt args``; record the exit code and every file written under ``out``."""
        before = set(out.rglob("*")) if out and out.exists() else set()
        result = self.runner.invoke(app, args, catch_exceptions=False)
        written = sorted(p for p in (set(out.rglob("*")) if out and out.exists() else set())
                         - before if p.is_file())
        first = (result.output.strip().splitlines() or [""])[0] if result.exit_code else ""
        first = first.replace(str(self.tmp), "TMP").replace(str(ROOT), "ROOT")
        self.entries[f"{key} exit"] = f"{result.exit_code} {first[:200]}"
        for path in written:
            if path.suffix == ".png":
                continue
            self.entries[f"{key} {path.name}"] = file_digest(path)
        return written

    def validate(self, key: str, instance: Path, solution: Path) -> None:
        result = self.runner.invoke(app, ["validate", str(instance), str(solution)],
                                    catch_exceptions=False)
        lines = [ln for ln in result.output.splitlines() if not ln.startswith("valid")]
        self.entries[f"{key} validate"] = f"{result.exit_code} {digest(chr(10).join(lines))}"


def policies_of(family: str) -> list[str]:
    from llmopt.policies.registry import POLICIES
    return [name for name, info in POLICIES.items() if info.family == family]


def problems_of(family: str) -> list[tuple[str, str]]:
    from llmopt.problems.registry import PROBLEMS
    return [(name, p.solvers[0]) for name, p in PROBLEMS.items() if p.family == family]


def instances(max_requests: int) -> list[tuple[Path, Any]]:
    found = []
    for path in sorted((ROOT / "instances").rglob("*.yaml")):
        if "sweeps" in path.parts:
            continue
        try:
            inst = load_instance(path)
        except LlmoptError as exc:
            print(f"skip {path.relative_to(ROOT)}: {exc}", flush=True)
            continue
        if inst.num_requests <= max_requests:
            found.append((path, inst))
    return found


def two_replicas(path: Path, tmp: Path) -> Path:
    doc = yaml.safe_load(path.read_text())
    doc["system"] = {**doc.get("system", {}), "instances": 2}
    target = tmp / f"{path.stem}-x2.yaml"
    target.write_text(yaml.safe_dump(doc, sort_keys=False))
    return target


def record(max_requests: int) -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="llmopt-fp-") as name:
        tmp = Path(name)
        rec = Recorder(tmp)
        rec.entries["list"] = digest(rec.runner.invoke(app, ["list", "--markdown"]).output)
        for path, inst in instances(max_requests):
            rel = str(path.relative_to(ROOT))
            family = inst.profile.family
            t0 = time.perf_counter()
            out = tmp / "out" / path.stem
            for policy in policies_of(family):
                key = f"{rel} replay {policy}"
                for written in rec.cli(key, ["replay", str(path), "--policy", policy,
                                             "--out", str(out), "--no-plot"], out):
                    if written.suffix == ".json":
                        rec.validate(key, path, written)
            if inst.num_requests <= SOLVE_MAX_REQUESTS:
                solves = [(p, s) for p, s in problems_of(family)]
                solves += [(p, s) for p, _ in problems_of(family)
                           for s in EXTRA_SOLVERS.get(p, ())]
                for problem, solver in solves:
                    key = f"{rel} solve {problem} {solver}"
                    sout = tmp / "solve" / path.stem / problem / solver
                    written = rec.cli(key, ["solve", str(path), "--problem", problem, "--solver",
                                            solver, "--time-limit", TIME_LIMIT_S, "--out",
                                            str(sout), "--no-plot"], sout)
                    for sol in (w for w in written if w.suffix == ".json"):
                        pout = tmp / "plan" / path.stem / problem / solver
                        for replayed in rec.cli(f"{key} plan", [
                                "replay", str(path), "--policy", "plan", "--plan", str(sol),
                                "--out", str(pout), "--no-plot"], pout):
                            if replayed.suffix == ".json":
                                rec.validate(f"{key} plan", path, replayed)
                cout = tmp / "compare" / path.stem
                rec.cli(f"{rel} compare", ["compare", str(path), "--time-limit", "5", "--out",
                                           str(cout)], cout)
            if path.stem in ROUTED:
                variant = two_replicas(path, tmp)
                for policy in ROUTED[path.stem]:
                    for router in ROUTERS:
                        key = f"{rel} x2 replay {policy} {router}"
                        rout = tmp / "routed" / path.stem / router
                        rec.cli(key, ["replay", str(variant), "--policy", policy, "--router",
                                      router, "--out", str(rout), "--no-plot"], rout)
            print(f"{rel}: {time.perf_counter() - t0:.1f} s", flush=True)
        return rec.entries


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="write the fingerprint here")
    ap.add_argument("--check", type=Path, nargs="+",
                    help="compare with these recorded fingerprints (an entry passes when it "
                    "equals one of them: record twice to allow for unstable solves)")
    ap.add_argument("--max-requests", type=int, default=2000)
    args = ap.parse_args()
    t0 = time.perf_counter()
    entries = record(args.max_requests)
    print(f"{len(entries)} entries in {time.perf_counter() - t0:.0f} s", flush=True)
    if args.out:
        args.out.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.out}")
    if args.check:
        records = [json.loads(path.read_text()) for path in args.check]
        want = records[0]
        differ = sorted(k for k in want.keys() & entries.keys()
                        if all(r.get(k) != entries[k] for r in records))
        changed = [k for k in differ if not UNSTABLE.search(k)]
        unstable = [k for k in differ if UNSTABLE.search(k)]
        missing = sorted(want.keys() - entries.keys())
        new = sorted(entries.keys() - want.keys())
        for title, keys in (("changed", changed), ("missing", missing), ("new", new),
                            ("unstable", unstable)):
            for key in keys:
                print(f"{title}: {key}: {want.get(key)} -> {entries.get(key)}")
        print(f"{len(changed)} changed, {len(missing)} missing, {len(new)} new of "
              f"{len(want)} recorded ({len(unstable)} unstable entries differ)")
        sys.exit(1 if changed or missing else 0)


if __name__ == "__main__":
    main()
