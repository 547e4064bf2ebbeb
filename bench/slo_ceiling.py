"""The ceiling on SLO attainment (issue 32, llmopt.problems.slo_ceiling): its time and memory at
trace scale, its tightness against the best policy, and the property check at full size.

Sections (each optional, all by default except the exact model's):

- ``--speed``: time and peak memory of ``attainment_ceiling`` (each in its own process) on
  slo-chat, the Azure and Mooncake samples with SLOs and, when ../shared/data is there, the
  full Azure conversation trace with ``slo: {multiple: 5}``;
- ``--tightness``: on slo-chat (its Poisson rate) and the two samples (``rate_scale`` on their
  real arrivals), the rates at which the best of POLICIES reaches 90 % and 99 % attainment
  (a bisection, as the sweep's search), the ceiling there, and the goodput ceiling against the
  best goodput;
- ``--property N``: N random instances (llmopt.experiments.slo_ceiling_check), every
  InferMax-family policy replayed on each and the exact model's best plan on the small ones:
  any count above the ceiling is a violation;
- ``--prefix-property N``: the same on N random instances with a prefix cache
  (``random_slo_instance(seed, prefix=True)``; no exact model, which computes every prompt
  token), published as its own section;
- ``--exact``: the 12-request instances of bench/attainment_bound.py with the relaxations
  beside the exact model (10 s each);
- ``--defer``: least-slack with and without Moore and Hodgson's deferral
  (``least-slack-defer``) on the tightness instances over a ladder of rates, beside the
  ceiling, published as its own section (slo-ceiling-defer).

Usage::

    python bench/slo_ceiling.py [--speed] [--tightness] [--property 1000] [--exact]
        [--prefix-property 300] [--defer] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time

import yaml
from _common import ROOT, command_line, header, publish

from llmopt.data.instance import Instance, instance_from_mapping
from llmopt.errors import LlmoptError
from llmopt.experiments.slo_ceiling_check import check_instance, met_count, random_slo_instance
from llmopt.policies.replay import replay
from llmopt.problems.slo_ceiling.ceiling import attainment_ceiling
from llmopt.problems.slo_ceiling.goodput import goodput_ceiling

POLICIES = ["vllm", "sarathi", "vllm-s-1024", "vllm-d", "sjf", "vllm-v1", "sola", "least-slack",
            "least-slack-defer"]
SHARED = ROOT.parent / "shared" / "data"
SPEED_CASES = {
    "slo-chat": ("instances/toy/slo-chat.yaml", None),
    "azure-sample (slo 5x)": ("instances/toy/infermax-azure-sample.yaml", {"multiple": 5}),
    "slo-mooncake-sample": ("instances/toy/slo-mooncake-sample.yaml", None),
    "azure-conv-infermax (slo 5x)": ("instances/paper/azure-conv-infermax.yaml",
                                     {"multiple": 5}),
}


def load(path: str, slo: dict | None) -> dict:
    doc = yaml.safe_load((ROOT / path).read_text())
    if slo is not None:
        doc["slo"] = slo
    return doc


def build(doc: dict, path: str, rate: float | None = None, scale: float | None = None
          ) -> Instance:
    doc = yaml.safe_load(yaml.safe_dump(doc))
    if rate is not None:
        doc["requests"]["generate"]["arrival"]["rate_per_s"] = rate
    inst = instance_from_mapping(doc, base_dir=(ROOT / path).parent)
    if scale is not None:
        inst = inst.with_requests(tuple(r.model_copy(update={"arrival_ms": r.arrival_ms / scale})
                                        for r in inst.requests))
    return inst


def build_at(doc: dict, path: str, knob: str, x: float) -> Instance:
    """The instance with ``knob`` (``rate_per_s`` or ``rate_scale``, as a sweep's search) at x."""
    return build(doc, path, rate=x if knob == "rate_per_s" else None,
                 scale=x if knob == "rate_scale" else None)


# --------------------------------------------------------------------- speed

def one(name: str) -> None:
    """Child process: the ceiling of one SPEED_CASES instance; prints a JSON line."""
    path, slo = SPEED_CASES[name]
    t0 = time.perf_counter()
    inst = build(load(path, slo), path)
    loaded = time.perf_counter() - t0
    ceiling = attainment_ceiling(inst, time_limit_s=60.0)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"name": name, "requests": inst.num_requests, "load_s": loaded,
                      "ceiling_s": ceiling.runtime_s, "rss_mb": rss_mb,
                      "met_max": ceiling.met_max, "method": ceiling.method,
                      "bounds": ceiling.bounds, "interrupted": ceiling.interrupted}))


def speed() -> list[str]:
    lines = ["### Time and memory", "",
             "| instance | requests | ceiling | method | bounds | time (s) | peak RSS (MB) |",
             "|---|---|---|---|---|---|---|"]
    for name, (path, _) in SPEED_CASES.items():
        if "paper" in path and not (SHARED / "traces").exists():
            lines.append(f"| {name} | — | needs ../shared/data | | | | |")
            continue
        out = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True,
                             text=True, check=True, cwd=ROOT / "bench")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        bounds = ", ".join(f"{k} {v}" for k, v in r["bounds"].items())
        lines.append(f"| {name} | {r['requests']} | {r['met_max']} "
                     f"({100 * r['met_max'] / r['requests']:.1f} %) | {r['method']} | "
                     f"{bounds} | {r['ceiling_s']:.2f} | {r['rss_mb']:.0f} |")
        print(lines[-1], flush=True)
    lines += ["", "Time: `attainment_ceiling` alone (the instance's loading apart); peak RSS "
              "of the whole process (Python, the instance, the flow)."]
    return lines


# --------------------------------------------------------------------- tightness

def best_attainment(inst: Instance) -> tuple[float, str]:
    best, who = -1.0, ""
    for p in POLICIES:
        try:
            share = met_count(inst, replay(inst, p)) / inst.num_requests
        except LlmoptError:   # e.g. a prompt longer than C without chunked prefill
            continue
        if share > best:
            best, who = share, p
    return best, who


def bisect(ok, low: float, high: float, steps: int = 12, rel: float = 0.01) -> float | None:
    """The sweep's search: the highest probed value where ``ok`` holds (geometric
    midpoints), None if not even at ``low``; ``high`` if there."""
    if not ok(low):
        return None
    if ok(high):
        return high
    good, bad = low, high
    for _ in range(steps):
        if bad / good <= 1 + rel:
            break
        mid = math.sqrt(good * bad)
        good, bad = (mid, bad) if ok(mid) else (good, mid)
    return good


TIGHT_CASES = {   # name: (path, slo, knob, low, high)
    "slo-chat": ("instances/toy/slo-chat.yaml", None, "rate_per_s", 2.0, 400.0),
    "azure-sample (slo 5x)": ("instances/toy/infermax-azure-sample.yaml", {"multiple": 5},
                              "rate_scale", 0.05, 50.0),
    "slo-mooncake-sample": ("instances/toy/slo-mooncake-sample.yaml", None, "rate_scale",
                            0.05, 50.0),
}


def tightness() -> list[str]:
    lines = ["### Tightness", "",
             "| instance | level | knob | best policy's goodput | best policy there | its "
             "attainment | ceiling there | ceiling − best | goodput ceiling | ratio |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    native = ["", "As given (the instance's own arrivals):", "",
              "| instance | best policy | its attainment | ceiling | ceiling − best |",
              "|---|---|---|---|---|"]
    for name, (path, slo, knob, low, high) in TIGHT_CASES.items():
        doc = load(path, slo)
        inst = build(doc, path)
        share, who = best_attainment(inst)
        ceiling = attainment_ceiling(inst)
        native.append(f"| {name} | {who} | {100 * share:.1f} % | {100 * ceiling.share:.1f} % "
                      f"({ceiling.method}) | {100 * (ceiling.share - share):.1f} pts |")
        print(native[-1], flush=True)

        def make(x: float, doc=doc, path=path, knob=knob) -> Instance:
            return build_at(doc, path, knob, x)

        for level in (0.9, 0.99):
            seen: dict[float, tuple[float, str]] = {}

            def ok(x: float, level=level, seen=seen, make=make) -> bool:
                seen[x] = best_attainment(make(x))
                return seen[x][0] >= level - 1e-6

            best = bisect(ok, low, high)
            ceiling_g = goodput_ceiling(make, level, low, high)
            shown = (f"below {low:g}" if ceiling_g.rate is None
                     else f"{ceiling_g.rate:.4g}"
                     + ("" if ceiling_g.scaled else " (not scaled draws!)"))
            if best is None:
                lines.append(f"| {name} | {level:g} | {knob} | below {low:g} | | | | | "
                             f"{shown} | |")
                continue
            inst = make(best)
            share, who = seen[best]
            ceiling = attainment_ceiling(inst)
            ratio = "" if ceiling_g.rate is None else f"{ceiling_g.rate / best:.2f}"
            lines.append(f"| {name} | {level:g} | {knob} | {best:.4g} | {who} | "
                         f"{100 * share:.1f} % | {100 * ceiling.share:.1f} % ({ceiling.method}) "
                         f"| {100 * (ceiling.share - share):.1f} pts | {shown} | {ratio} |")
            print(lines[-1], flush=True)
    lines += ["", f"Best policy: the best of {', '.join(POLICIES)} at each probe. Goodput: "
              "the sweep's search (bisection on geometric midpoints within 1 %) for the best "
              "policy, and `goodput_ceiling` for the ceiling (the relaxations that cannot grow "
              "when arrivals are compressed). Ratio: goodput ceiling / best policy's goodput."]
    return lines + native


DEFER_LADDER = {"slo-chat": (40.0, 60.0, 80.0, 100.0, 150.0, 200.0, 400.0),
                "azure-sample (slo 5x)": (0.25, 0.32, 0.5, 1.0, 2.0),
                "slo-mooncake-sample": (0.25, 0.5, 1.0, 2.0)}


def defer_table() -> list[str]:
    """least-slack with and without Moore and Hodgson's deferral (least-slack-defer) on the
    tightness instances: attainment and replay time at each knob value of DEFER_LADDER."""
    lines = ["| instance | knob | value | least-slack | least-slack-defer | ceiling | "
             "replay time (s): least-slack, -defer |", "|---|---|---|---|---|---|---|"]
    for name, values in DEFER_LADDER.items():
        path, slo, knob, _, _ = TIGHT_CASES[name]
        doc = load(path, slo)
        for x in values:
            inst = build_at(doc, path, knob, x)
            cells, times = [], []
            for policy in ("least-slack", "least-slack-defer"):
                t0 = time.perf_counter()
                met = met_count(inst, replay(inst, policy))
                cells.append(f"{100 * met / inst.num_requests:.1f} %")
                times.append(f"{time.perf_counter() - t0:.2f}")
            ceiling = attainment_ceiling(inst)
            lines.append(f"| {name} | {knob} | {x:g} | {cells[0]} | {cells[1]} | "
                         f"{100 * ceiling.share:.1f} % | {', '.join(times)} |")
            print(lines[-1], flush=True)
    return lines


# --------------------------------------------------------------------- property

def property_check(count: int, exact_up_to: int = 8, prefix: bool = False) -> list[str]:
    t0 = time.perf_counter()
    beyond_uncached = 0
    replays = violations = exact_runs = exact_errors = 0
    examples: list[str] = []
    gaps = []
    sizes = []
    for seed in range(count):
        inst = random_slo_instance(seed, prefix=prefix)
        result = check_instance(inst, exact_up_to=exact_up_to, exact_time_s=2.0)
        replays += len(result.counts)
        if prefix and result.counts:
            uncached = attainment_ceiling(inst.with_system(prefix_caching=False))
            beyond_uncached += max(result.counts.values()) > uncached.met_max
        sizes.append(inst.num_requests)
        if result.exact_best is not None:
            exact_runs += 1
        if result.exact_error:
            exact_errors += 1
        if result.violations:
            violations += len(result.violations)
            examples += [f"seed {seed}: {v}" for v in result.violations[:1]]
        best = max([*result.counts.values(), result.exact_best or 0])
        gaps.append((result.ceiling - best) / inst.num_requests)
        if seed % 50 == 49:
            print(f"{seed + 1} instances, {replays} replays, {violations} violations, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    tight = sum(1 for g in gaps if g == 0)
    what = (f"- {count} random instances with a prefix cache (seeds 0–{count - 1}, "
            f"{min(sizes)}–{max(sizes)} requests, mean {sum(sizes) / count:.1f}; shared leading "
            f"hash blocks in one to three groups, KV blocks of 1–4 tokens), {replays} policy "
            "replays (every InferMax-family policy that can run each instance); on "
            f"{beyond_uncached} of them a policy meets more than the ceiling computed as if "
            "every prompt token were computed" if prefix else
            f"- {count} random instances (seeds 0–{count - 1}, {min(sizes)}–{max(sizes)} "
            f"requests, mean {sum(sizes) / count:.1f}), {replays} policy replays (every "
            "InferMax-family policy that can run each instance), the exact model's best plan "
            f"on {exact_runs} instances of at most {exact_up_to} requests (2 s each; "
            f"{exact_errors} ended in the exact model's hint-completion error, see the report)")
    lines = ["### Property check" + (" with a prefix cache" if prefix else ""), "", what,
             f"- **violations: {violations}**" + (f" ({'; '.join(examples[:3])})"
                                                  if examples else ""),
             f"- ceiling equal to the best schedule found on {tight} of {count} instances; "
             f"mean ceiling − best: {100 * sum(gaps) / count:.1f} % of the requests",
             f"- {time.perf_counter() - t0:.0f} s"]
    return lines


# --------------------------------------------------------------------- exact model

def exact_section(time_limit: float = 10.0) -> list[str]:
    from attainment_bound import random_instance

    from llmopt.problems.workflows.attainment import attainment_bound
    lines = ["### The 12-request instances of bench/attainment_bound.py", "",
             "| instance | relaxations | exact model bound | best schedule | proven |",
             "|---|---|---|---|---|"]
    proven = 0
    for seed in range(10):
        inst = random_instance(seed, 12, 100.0, 3.0)
        relaxed = attainment_ceiling(inst)
        exact = attainment_bound(inst, time_limit_s=time_limit, workers=2)
        upper = min(relaxed.met_max, exact.met_upper)
        ok = exact.met_best == upper
        proven += ok
        lines.append(f"| {inst.name} | {relaxed.met_max} ({relaxed.method}) | "
                     f"{exact.met_upper} | {exact.met_best} | {'yes' if ok else 'no'} |")
        print(lines[-1], flush=True)
    lines += ["", f"{proven}/10 proven (best schedule = the least bound) with the relaxations "
              f"beside the exact model ({time_limit:g} s)."]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--tightness", action="store_true")
    ap.add_argument("--property", type=int, default=0, metavar="N")
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--prefix-property", type=int, default=0, metavar="N")
    ap.add_argument("--defer", action="store_true")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    if args.one:
        one(args.one)
        return
    if args.prefix_property:
        lines = [header(command_line()), "",
                 *property_check(args.prefix_property, exact_up_to=0, prefix=True)]
        publish(args.write_docs, "slo-ceiling-prefix", "\n".join(lines))
        return
    if args.defer:
        publish(args.write_docs, "slo-ceiling-defer",
                "\n".join([header(command_line()), "", *defer_table()]))
        return
    everything = not (args.speed or args.tightness or args.property or args.exact)
    lines = [header(command_line())]
    if args.speed or everything:
        lines += [*speed(), ""]
    if args.tightness or everything:
        lines += [*tightness(), ""]
    if args.property or everything:
        lines += [*property_check(args.property or 1000), ""]
    if args.exact:
        lines += [*exact_section(), ""]
    publish(args.write_docs, "slo-ceiling", "\n".join(lines))


if __name__ == "__main__":
    main()
