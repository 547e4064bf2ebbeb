"""SOLA's Fig. 7/8 under llmopt's cost models (issue 15): goodput at 90 % and 99 % SLO
attainment of SOLA and its baselines, found by the sweep's bisection over the Poisson arrival
rate, on a ShareGPT-like workload with a Llama-3-8B-class profile and the Llama-3-70B profile,
tight and loose SLOs by SOLA's rule (10x/15x the single-request latency for 8B, 5x/10x for 70B).

The workload: ``COUNT`` requests with lognormal lengths of the ShareGPT means the vLLM paper
reports (Kwon et al. 2023, Fig. 11: input 161 and output 338 tokens on average; the standard
deviations, equal to the means, are our assumption), clipped to [4, 2048].

With ``--readings``, instead: the attainment of SOLA under each reading of the paper that
``SolaOptions`` names (the faithful default, the earlier readings, and the default with one
earlier reading), beside vLLM V1 and vLLM-D, at the Poisson rate where the best baseline's
goodput at 99 % was found (``READING_RATES``, from the goodput table).

Usage::

    python bench/sola_goodput.py [--count 1000] [--steps 7] [--workers 2] [--write-docs]
    python bench/sola_goodput.py --readings [--count 1000] [--write-docs]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import pandas as pd
from _common import ROOT, command_line, header, publish

from llmopt.data.instance import Instance, instance_from_mapping
from llmopt.policies.replay import replay
from llmopt.policies.routing import RoundRobin
from llmopt.policies.slo.sola import Sola, SolaOptions
from llmopt.schedule.metrics import slo_metrics
from llmopt.sim.cluster import Deployment, simulate
from llmopt.sweep.runner import run_sweep
from llmopt.sweep.spec import load_sweep

POLICIES = ["sola", "vllm-s-1024", "vllm-d", "sjf", "vllm-v1"]
SETTINGS = [  # model, SLO multiple (tight, loose), rate search range (requests/s)
    ("infermax-llama3-8b-a100", {"tight": 10, "loose": 15}, (2.0, 400.0)),
    ("infermax-llama3-70b-4xa100", {"tight": 5, "loose": 10}, (0.5, 100.0)),
]
#: (model, multiple) -> the best baseline's goodput at 99 % (requests/s), from the goodput table
READING_RATES = {("infermax-llama3-8b-a100", 10): 21.17, ("infermax-llama3-8b-a100", 15): 23.00,
                 ("infermax-llama3-70b-4xa100", 5): 4.30,
                 ("infermax-llama3-70b-4xa100", 10): 9.45}
PAPER_RATIOS = {90: {"vllm-s-1024": 1.27, "vllm-d": 1.11, "sjf": 1.08},
                99: {"vllm-s-1024": 1.11, "vllm-d": 1.06, "sjf": 1.04}}

SWEEP = """
name: {name}
instances:
  - name: sharegpt-like
    model: {model}
    system: {{clients: 256}}
    requests:
      generate:
        count: {count}
        seed: 0
        input: {{dist: lognormal, mean: 161, std: 161, min: 4, max: 2048}}
        output: {{dist: lognormal, mean: 338, std: 338, min: 4, max: 2048}}
        arrival: {{process: poisson, rate_per_s: 1}}
    slo: {{multiple: {multiple}}}
grid:
  policy: {policies}
metrics: [attainment, attainment_ttft, attainment_tpot]
search: {{parameter: rate_per_s, low: {low}, high: {high}, metric: attainment,
         at_least: {level}, steps: {steps}}}
"""


def goodput_table(count: int, steps: int, workers: int, folder: Path) -> pd.DataFrame:
    rows = []
    for model, multiples, (low, high) in SETTINGS:
        for tightness, multiple in multiples.items():
            for level in (0.90, 0.99):
                name = f"{model}-{tightness}-{int(level * 100)}"
                path = folder / f"{name}.yaml"
                path.write_text(SWEEP.format(name=name, model=model, count=count,
                                             multiple=multiple, policies=POLICIES, low=low,
                                             high=high, level=level, steps=steps))
                report = run_sweep(load_sweep(path), folder / name, workers=workers)
                table = report.search
                assert table is not None
                for _, row in table.iterrows():
                    rows.append({"model": model.removeprefix("infermax-"), "slo": tightness,
                                 "attainment": f"{level:.0%}", "policy": row["policy"],
                                 "goodput": row["largest_rate_per_s"],
                                 "first failing": row["first_failing_rate_per_s"],
                                 "note": row["note"]})
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame) -> str:
    lines = ["| model | SLO | attainment ≥ | " + " | ".join(POLICIES) + " |",
             "|---|---|---|" + "---|" * len(POLICIES)]
    ratios: dict[tuple[str, str], list[float]] = {}
    for (model, slo, level), group in table.groupby(["model", "slo", "attainment"], sort=False):
        by = group.set_index("policy")
        cells = []
        for p in POLICIES:
            ok, bad = by.loc[p, "goodput"], by.loc[p, "first failing"]
            cells.append("—" if pd.isna(ok) else
                         f"{ok:.2f} (< {bad:.2f})" if not pd.isna(bad) else f"≥ {ok:.2f}")
        lines.append(f"| {model} | {slo} | {level} | " + " | ".join(cells) + " |")
        sola = by.loc["sola", "goodput"]
        for p in POLICIES[1:]:
            base = by.loc[p, "goodput"]
            if not pd.isna(sola) and not pd.isna(base) and base > 0:
                ratios.setdefault((level, p), []).append(sola / base)
    lines += ["", "SOLA's goodput over each baseline's, mean over the four settings "
              "(the paper's Fig. 8 averages in brackets):", "",
              "| attainment ≥ | " + " | ".join(POLICIES[1:]) + " |",
              "|---|" + "---|" * (len(POLICIES) - 1)]
    for level in ("90%", "99%"):
        paper = PAPER_RATIOS[int(level[:-1])]
        cells = []
        for p in POLICIES[1:]:
            got = ratios.get((level, p))
            mean = f"{sum(got) / len(got):.2f}x" if got else "—"
            cells.append(f"{mean} ({paper[p]:.2f}x)" if p in paper else mean)
        lines.append(f"| {level} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def readings_table(count: int) -> str:
    """Attainment of every reading of SOLA and two baselines at READING_RATES."""
    options = SolaOptions()
    earlier = SolaOptions.earlier()
    variants = {"faithful (default)": options, "earlier readings": earlier}
    for name in ("both_failing", "ttft_decodes", "eq2_prediction", "memory_check"):
        value = getattr(earlier, name)
        variants[f"default, {name}={value}"] = dataclasses.replace(options, **{name: value})
    columns = ["vllm-v1", "vllm-d", *variants]
    lines = ["| model | SLO | rate (req/s) | " + " | ".join(columns) + " |",
             "|---|---|---|" + "---|" * len(columns)]
    for model, multiples, _ in SETTINGS:
        for tightness, multiple in multiples.items():
            rate = READING_RATES[(model, multiple)]
            inst = instance_at(rate, count, model, multiple)
            cells = []
            for column in columns:
                if column in variants:
                    policies = [Sola(variants[column]) for _ in range(inst.system.instances)]
                    schedule = simulate(inst, Deployment("sola", policies, RoundRobin()))
                else:
                    schedule = replay(inst, column)
                m = slo_metrics(schedule, inst)
                cells.append(f"{m['attainment']:.1%} ({m['attainment_ttft']:.1%} / "
                             f"{m['attainment_tpot']:.1%})")
            lines.append(f"| {model.removeprefix('infermax-')} | {tightness} | {rate:.2f} | "
                         + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def instance_at(rate: float, count: int, model: str, multiple: float) -> Instance:
    """The sweep's instance at Poisson ``rate`` (the same draws as its cells)."""
    return instance_from_mapping({
        "name": "readings", "model": model, "system": {"clients": 256},
        "requests": {"generate": {
            "count": count, "seed": 0,
            "input": {"dist": "lognormal", "mean": 161, "std": 161, "min": 4, "max": 2048},
            "output": {"dist": "lognormal", "mean": 338, "std": 338, "min": 4, "max": 2048},
            "arrival": {"process": "poisson", "rate_per_s": rate}}},
        "slo": {"multiple": multiple}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--readings", action="store_true",
                        help="attainment of each reading of SOLA at fixed rates instead")
    args = parser.parse_args()
    if args.readings:
        body = (header(command_line()) + "\n"
                + "Attainment (TTFT / TPOT attainment in brackets) at the Poisson rate where the "
                "best baseline's goodput at 99 % was found; columns after vllm-d are SOLA "
                "under each reading (`SolaOptions`).\n\n" + readings_table(args.count))
        print(body)
        publish(args.write_docs, "sola-readings", body, ROOT / "docs" / "reproduction.md")
        return
    with tempfile.TemporaryDirectory() as tmp:
        table = goodput_table(args.count, args.steps, args.workers, Path(tmp))
    body = (header(command_line()) + "\n"
            + "Goodput (requests/s): the largest Poisson rate found with attainment at or above "
            "the level, and in brackets the smallest rate found below it.\n\n"
            + markdown(table))
    print(body)
    publish(args.write_docs, "sola-goodput", body, ROOT / "docs" / "reproduction.md")


if __name__ == "__main__":
    main()
