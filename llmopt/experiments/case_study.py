"""Experiments of the papers that several front ends share (bench scripts, notebooks, docs)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from llmopt.data.instance import Instance, instance_from_mapping
from llmopt.policies.replay import replay
from llmopt.progress import SILENT, Progress

GSM8K_SYSTEM = {"clients": 200, "kv_capacity": 131072, "max_batch_tokens": 4096,
                "max_prefill_tokens": 4096, "instances": 1}


def gsm8k_like(n: int = 1319, clients: int = 200, seed: int = 7, *, name: str | None = None,
               **system: Any) -> Instance:
    """n requests with the GSM8K statistics of Pang et al. 2025, Table III (input 68.43 ± 25.04,
    output 344.83 ± 187.99 capped at 512 tokens) on LLaMA-65B (``pang-llama65b-ascend8``); with
    the defaults, ``instances/paper/gsm8k-llama65b.yaml``'s workload. ``system`` overrides the
    paper's system (1024 × 128 KV tokens, 4096-token stages)."""
    return instance_from_mapping({
        "name": name or f"gsm8k-{n}x{clients}-seed{seed}", "model": "pang-llama65b-ascend8",
        "system": {**GSM8K_SYSTEM, "clients": clients, **system},
        "requests": {"generate": {
            "count": n, "seed": seed,
            "input": {"dist": "normal", "mean": 68.43, "std": 25.04, "min": 1},
            "output": {"dist": "normal", "mean": 344.83, "std": 187.99, "min": 1, "max": 512},
        }},
    })


def pang_case_study(cases: int = 100, first_seed: int = 1000,
                    policies: tuple[str, ...] = ("baseline", "hybrid"),
                    progress: Progress = SILENT) -> pd.DataFrame:
    """Pang et al. 2025, Figs 10–11: random cases with the GSM8K statistics of Table III,
    replayed under each policy; one row per case and policy with utilization and generation
    speed (output tokens per second)."""
    rows = []
    for k in range(cases):
        inst = gsm8k_like(seed=first_seed + k)
        progress.stage(f"case {k + 1}/{cases}")
        for policy in policies:
            m = replay(inst, policy).metrics()
            rows.append({"case": k, "seed": first_seed + k, "policy": policy,
                         "makespan_s": m["makespan_ms"] / 1000.0,
                         "utilization": m["utilization"], "tokens_per_s": m["tokens_per_s"]})
    return pd.DataFrame(rows)


def case_study_summary(frame: pd.DataFrame, baseline: str = "baseline",
                       method: str = "hybrid") -> dict[str, float]:
    """Average improvement of ``method`` over ``baseline`` across cases (as the paper reports:
    utilization in percentage points, generation speed in tokens/s)."""
    wide = frame.pivot(index="case", columns="policy")
    u0, u1 = wide["utilization"][baseline], wide["utilization"][method]
    du = (u1 - u0) * 100
    dt = wide["tokens_per_s"][method] - wide["tokens_per_s"][baseline]
    return {"cases": len(wide), "utilization_gain_pp": float(du.mean()),
            "utilization_gain_relative": float((u1 / u0 - 1).mean()),
            "utilization_gain_min_pp": float(du.min()),
            "tokens_per_s_gain": float(dt.mean()), "tokens_per_s_gain_min": float(dt.min()),
            "method_better_in": int((dt > 0).sum())}
