"""Cost profiles: how long an iteration takes on a given LLM × hardware pair.

One small class per family, all loaded from ``models/*.yaml`` (by name) or from an inline mapping
in an instance. Every profile names its source. Times are in milliseconds, sizes in tokens.

Families
--------
``pang_linear``
    Pang et al. 2025, section V.A: a prefill stage costs ``overhead + per_token × tokens``; a
    decode round costs ``overhead + per_client × clients decoding`` (one token per client).
``bilinear``
    Huang et al. 2025, eqs 14–15 (after Cheng et al. 2024): prefill and per-token decode times
    bilinear in batch size and length.
``infermax``
    Kim et al. 2025, section 3.2: a batch's time is linear in the tokens processed and the KVs
    read by decodes, plus prefill attention in Σ(c² + 2mc) and a term per prefill request.
``scls``
    Cheng et al. 2024, eqs 1–9 and Algorithm 2: padded static batches served for a slice of S
    iterations; serving time bilinear in batch size and padded length, KV memory rules.
``roofline``
    A roofline estimate from a model's architecture and a GPU's peaks (``llmopt profile
    roofline --family roofline``), timing the infermax family's iterations itself where the
    InferMax form fitted to it errs; the infermax family's policies replay on it.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from llmopt.data.cost.base import CostProfile
from llmopt.data.cost.bilinear import BilinearProfile
from llmopt.data.cost.infermax import InferMaxProfile
from llmopt.data.cost.pang import PangLinearProfile, prefill_levels
from llmopt.data.cost.roofline import RooflineProfile
from llmopt.data.cost.scls import SclsProfile
from llmopt.errors import ProfileError, unknown_name
from llmopt.files import load_yaml_mapping, validated

PROFILE_CLASSES: dict[str, type[CostProfile]] = {
    "pang_linear": PangLinearProfile, "bilinear": BilinearProfile, "infermax": InferMaxProfile,
    "scls": SclsProfile, "roofline": RooflineProfile}
FAMILIES = tuple(PROFILE_CLASSES)


def models_dirs() -> list[Path]:
    """Folders searched for ``<name>.yaml``: ``$LLMOPT_MODELS`` (os.pathsep-separated), then the
    profiles shipped with llmopt (``models/`` of the repository, package data ``llmopt/data/
    models`` once installed)."""
    dirs = [Path(p) for p in os.environ.get("LLMOPT_MODELS", "").split(os.pathsep) if p]
    dirs.append(Path(str(files("llmopt.data") / "models")))
    return dirs


def available_profiles() -> list[str]:
    names: set[str] = set()
    for d in models_dirs():
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.yaml"))
    return sorted(names)


def profile_from_mapping(data: Any, *, file: str | Path | None, field: str = "") -> CostProfile:
    if not isinstance(data, dict):
        raise ProfileError("a profile must be a mapping", file=file, field=field or None,
                           value=data)
    family = data.get("family")
    if family not in FAMILIES:
        raise ProfileError(
            unknown_name("profile family", family, FAMILIES),
            file=file, field=f"{field}.family" if field else "family", value=family,
            has_value=True,
        )
    profile: CostProfile = validated(PROFILE_CLASSES[family], data, file=file, prefix=field,
                                     error=ProfileError)
    return profile


def profile_yaml(data: dict[str, Any], *, file: str | Path | None) -> str:
    """``data`` as a profile file's YAML text, once it is checked to be a valid profile (the
    errors name ``file``): what ``llmopt profile roofline`` and ``fit-profile`` write."""
    profile_from_mapping(data, file=file)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=96)


def load_profile(
    ref: str | dict[str, Any], *, base_dir: Path | None = None, file: str | Path | None = None,
    field: str = "model",
) -> CostProfile:
    """Resolve a profile reference: a mapping (inline), a path to a YAML file (relative to
    ``base_dir``), or a name looked up in :func:`models_dirs`."""
    if isinstance(ref, dict):
        data = dict(ref)
        data.setdefault("name", "inline")
        return profile_from_mapping(data, file=file, field=field)
    if not isinstance(ref, str) or not ref.strip():
        raise ProfileError("must be a profile name or a mapping", file=file, field=field,
                           value=ref, has_value=True)
    path = _find_profile_file(ref, base_dir)
    if path is None:
        raise ProfileError(unknown_name("profile", ref, available_profiles()), file=file,
                           field=field, value=ref)
    data = load_yaml_mapping(path, "profile")
    data.setdefault("name", path.stem)
    return profile_from_mapping(data, file=path)


def _find_profile_file(ref: str, base_dir: Path | None) -> Path | None:
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        candidate = Path(ref)
        if not candidate.is_absolute() and base_dir is not None:
            candidate = base_dir / candidate
        return candidate if candidate.is_file() else None
    for d in models_dirs():
        candidate = d / f"{ref}.yaml"
        if candidate.is_file():
            return candidate
    return None


__all__ = ["FAMILIES", "BilinearProfile", "CostProfile", "InferMaxProfile", "PangLinearProfile",
           "RooflineProfile", "available_profiles", "load_profile", "models_dirs", "prefill_levels",
           "profile_from_mapping", "profile_yaml"]
