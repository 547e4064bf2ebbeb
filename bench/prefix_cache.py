"""Automatic prefix caching (issue 33): the replay's time and memory at trace scale, and its hit
rates against the reuse counted from the hash ids alone.

- ``speed``: vLLM V1's scheduler (``vllm-v1``) on the whole Mooncake conversation trace
  (12,031 requests, ../shared/data/traces/mooncake_conversation.jsonl) on the 70B InferMax
  profile with M = 400,000 KV tokens (100,000 refuses a 121K-token request) and C = 16,384,
  caching off and on, each in its own process: wall and CPU time of ``replay``, peak RSS,
  preemptions, TTFT;
- ``hits``: the token hit rate of the same replay at M = 400K and 1.6M and with memory
  unbounded (M = 10^9), beside the ideal reuse of ``llmopt.data.prefix.ideal_reuse`` (one
  replica, unlimited memory, arrival order) on the conversation and synthetic traces; and the
  equality check: on the bundled Mooncake sample with arrivals 10^6 ms apart and memory
  unbounded, every request's hit equals its ideal;
- ``sample``: the bundled Mooncake sample (300 requests, M = 100K) under ``vllm-v1``, caching
  off and on (the guide's table).

Usage::

    python bench/prefix_cache.py [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from _common import ROOT, command_line, docs_parser, header, publish

from llmopt.data.instance import Instance, instance_from_mapping, load_instance
from llmopt.data.prefix import ideal_reuse
from llmopt.policies.replay import replay, replay_result
from llmopt.validate import validate_solution

TRACES = ROOT.parent / "shared" / "data" / "traces"
CONVERSATION = TRACES / "mooncake_conversation.jsonl"
SYNTHETIC = TRACES / "mooncake_synthetic.jsonl"
M_SPEED = 400_000


def trace_instance(path, kv: int, caching: bool) -> Instance:
    return instance_from_mapping({
        "name": path.stem, "model": "infermax-llama3-70b-4xa100",
        "system": {"clients": 256, "kv_capacity": kv, "max_batch_tokens": 16384,
                   "prefix_caching": caching},
        "requests": {"trace": str(path), "format": "mooncake"}})


def one(kv: int, caching: bool) -> None:
    """Child process: one replay of the conversation trace; prints a JSON line."""
    inst = trace_instance(CONVERSATION, kv, caching)
    base_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0, c0 = time.perf_counter(), time.process_time()
    schedule = replay(inst, "vllm-v1")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    m = schedule.metrics()
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "peak_mb": peak_mb, "base_mb": base_mb,
                      "requests": inst.num_requests, "evictions": m["evictions"],
                      "ttft_mean_ms": m["ttft_mean_ms"], "ttft_p99_ms": m["ttft_p99_ms"],
                      "hit": m.get("prefix_hit_rate_tokens"),
                      "saved": m.get("prefill_tokens_saved")}))


def child(kv: int, caching: bool) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", str(kv), str(int(caching))],
                         check=True, capture_output=True, text=True, cwd=ROOT / "bench")
    found: dict = json.loads(out.stdout.strip().splitlines()[-1])
    return found


def speed_section() -> tuple[str, dict[int, dict]]:
    runs = {caching: child(M_SPEED, caching) for caching in (False, True)}
    lines = ["| caching | requests | replay wall (s) | replay CPU (s) | peak RSS (MB) | "
             "preemptions | TTFT mean (s) | token hit rate |", "|---|---|---|---|---|---|---|---|"]
    for caching, r in runs.items():
        hit = "—" if r["hit"] is None else f"{r['hit']:.1%}"
        lines.append(f"| {'on' if caching else 'off'} | {r['requests']:,} | {r['wall_s']:.1f} | "
                     f"{r['cpu_s']:.1f} | {r['peak_mb']:.0f} | {r['evictions']:,} | "
                     f"{r['ttft_mean_ms'] / 1000:.1f} | {hit} |")
    return "\n".join(lines), {M_SPEED: runs[True]}


def hits_section(known: dict[int, dict]) -> str:
    ideal_conv = ideal_reuse(trace_instance(CONVERSATION, M_SPEED, True), 16)
    ideal_syn = ideal_reuse(trace_instance(SYNTHETIC, M_SPEED, True), 16)
    lines = ["| conversation trace, vllm-v1, one replica | token hit rate | blocks |",
             "|---|---|---|",
             f"| ideal (ids alone, arrival order, unlimited memory) | "
             f"{ideal_conv.token_hit_rate:.1%} | {ideal_conv.block_hit_rate:.1%} |"]
    for kv in (M_SPEED, 1_600_000, 10 ** 9):
        r = known.get(kv) or child(kv, True)
        label = "unbounded (10^9)" if kv == 10 ** 9 else f"{kv:,}"
        lines.append(f"| replay, M = {label} KV tokens | {r['hit']:.1%} | |")
    lines.append(f"\nThe synthetic trace's ideal reuse: {ideal_syn.token_hit_rate:.1%} of prompt "
                 f"tokens ({ideal_syn.block_hit_rate:.1%} of full blocks).")
    # the equality check: arrivals far apart, memory unbounded, one replica
    sample = load_instance(ROOT / "instances" / "toy" / "slo-mooncake-sample.yaml")
    spaced = sample.with_system(prefix_caching=True, kv_capacity=10 ** 9).with_requests(tuple(
        r.model_copy(update={"arrival_ms": 1e6 * k}) for k, r in enumerate(sample.requests)))
    result, schedule = replay_result(spaced, "vllm-v1")
    cached = schedule.requests.set_index(schedule.requests["request"].astype(str))
    got = cached["cached_tokens"].reindex(list(spaced.ids)).to_numpy()
    ideal = ideal_reuse(spaced, 16)
    equal = bool((got == ideal.hit_tokens).all())
    valid = validate_solution(spaced, result.to_dict(spaced)) == []
    lines.append(f"\nCheck (the bundled sample, arrivals 10^6 ms apart, M = 10^9): every "
                 f"request's hit equals its ideal: **{equal}** (hit rate "
                 f"{schedule.metrics()['prefix_hit_rate_tokens']:.1%} = ideal "
                 f"{ideal.token_hit_rate:.1%}); schedule valid: {valid}.")
    return "\n".join(lines)


def sample_section() -> str:
    sample = load_instance(ROOT / "instances" / "toy" / "slo-mooncake-sample.yaml")
    lines = ["| caching | TTFT mean (s) | TTFT p99 (s) | makespan (s) | preemptions | "
             "token hit rate | prefill tokens saved |", "|---|---|---|---|---|---|---|"]
    for caching in (False, True):
        inst = sample.with_system(prefix_caching=caching)
        result, schedule = replay_result(inst, "vllm-v1")
        assert validate_solution(inst, result.to_dict(inst)) == []
        m = schedule.metrics(inst)
        hit = "—" if not caching else f"{m['prefix_hit_rate_tokens']:.1%}"
        saved = "—" if not caching else f"{m['prefill_tokens_saved']:,}"
        lines.append(f"| {'on' if caching else 'off'} | {m['ttft_mean_ms'] / 1000:.1f} | "
                     f"{m['ttft_p99_ms'] / 1000:.1f} | {m['makespan_ms'] / 1000:.1f} | "
                     f"{m['evictions']:,} | {hit} | {saved} |")
    return "\n".join(lines)


def main() -> None:
    ap = docs_parser(__doc__.splitlines()[0])
    ap.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        one(args.one[0], bool(args.one[1]))
        return
    body = [header(command_line()), "### The Mooncake conversation trace, vllm-v1 "
            f"(M = {M_SPEED:,}, C = 16,384)\n"]
    if not CONVERSATION.exists():
        body.append(f"{CONVERSATION} not found: the trace sections were skipped.")
        known: dict[int, dict] = {}
    else:
        table, known = speed_section()
        body += [table, "\n### Hit rates against the ideal reuse\n", hits_section(known)]
    body += ["\n### The bundled Mooncake sample (300 requests, M = 100K), vllm-v1\n",
             sample_section()]
    publish(args.write_docs, "prefix-cache", "\n".join(body))


if __name__ == "__main__":
    main()
