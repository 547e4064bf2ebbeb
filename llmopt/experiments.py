"""Experiments of the papers that several front ends share (bench scripts, notebooks, docs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from llmopt._io import load_yaml_mapping
from llmopt.instance import Instance, instance_from_mapping
from llmopt.policies.replay import replay
from llmopt.progress import SILENT, Progress

GSM8K = Path(__file__).resolve().parent.parent / "instances" / "paper" / "gsm8k-llama65b.yaml"


def with_seed(path: Path, seed: int) -> Instance:
    """The instance at ``path`` (a generated one) with another generator seed."""
    data: dict[str, Any] = load_yaml_mapping(path, "instance file")
    data["requests"]["generate"]["seed"] = seed
    data["name"] = f"{data.get('name', path.stem)}-seed{seed}"
    return instance_from_mapping(data, file=path)


def pang_case_study(cases: int = 100, first_seed: int = 1000,
                    policies: tuple[str, ...] = ("baseline", "hybrid"),
                    base: Path = GSM8K, progress: Progress = SILENT) -> pd.DataFrame:
    """Pang et al. 2025, Figs 10–11: random cases with the GSM8K statistics of Table III,
    replayed under each policy; one row per case and policy with utilization and generation
    speed (output tokens per second)."""
    rows = []
    for k in range(cases):
        inst = with_seed(base, first_seed + k)
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
