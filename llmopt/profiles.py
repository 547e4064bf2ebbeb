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
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from llmopt._io import load_yaml_mapping, validated
from llmopt.errors import ProfileError

NonNegFloat = Annotated[float, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LinearStage(_Strict):
    overhead_ms: NonNegFloat
    per_token_ms: NonNegFloat


class LinearRound(_Strict):
    overhead_ms: NonNegFloat
    per_client_ms: NonNegFloat


class KvCache(_Strict):
    blocks: PositiveInt
    block_size: PositiveInt

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_size


class CostProfile(_Strict):
    """Fields every profile has."""

    name: str
    family: str
    source: str = Field(min_length=1)

    def describe(self) -> str:
        return f"{self.name} ({self.family})"


class PangLinearProfile(CostProfile):
    """Stage-level linear cost model of the PD-competition paper (Pang et al. 2025, V.A)."""

    family: Literal["pang_linear"]
    prefill: LinearStage
    decode: LinearRound
    kv: KvCache | None = None
    clients: PositiveInt | None = None
    max_prefill_tokens: PositiveInt | None = None
    prefill_level_step: PositiveInt | None = None

    def prefill_stage_ms(self, tokens: int) -> float:
        """Duration of a prefill stage that processes ``tokens`` prompt tokens (0 if empty)."""
        if tokens <= 0:
            return 0.0
        return self.prefill.overhead_ms + self.prefill.per_token_ms * tokens

    def decode_round_ms(self, clients: int) -> float:
        """Duration of one decode round in which ``clients`` clients each produce one token."""
        if clients <= 0:
            return 0.0
        return self.decode.overhead_ms + self.decode.per_client_ms * clients


class BilinearCoefficients(_Strict):
    alpha: float
    beta: float
    gamma: float
    delta: float

    def __call__(self, batch: float, length: float) -> float:
        return self.alpha * batch * length + self.beta * batch + self.gamma * length + self.delta


class BilinearProfile(CostProfile):
    """Bilinear latency predictor of Huang et al. 2025, eqs 14–16."""

    family: Literal["bilinear"]
    prefill: BilinearCoefficients
    decode: BilinearCoefficients
    valid_max_tokens: PositiveInt | None = None

    def prefill_ms(self, batch: int, input_tokens: int) -> float:
        """Eq 14: prefill time of a request of ``input_tokens`` in a batch of ``batch``."""
        return self.prefill(batch, input_tokens)

    def decode_step_ms(self, batch: int, accumulated_tokens: int) -> float:
        """Eq 15: time of one decode step (one token) at batch size and accumulated length."""
        return self.decode(batch, accumulated_tokens)

    def request_decode_ms(self, batch: int, input_tokens: int, output_tokens: int) -> float:
        """Eq 16: sum of eq 15 over the request's output tokens (closed form)."""
        n = output_tokens
        lengths = n * input_tokens + n * (n + 1) / 2
        d = self.decode
        return (d.alpha * batch + d.gamma) * lengths + n * (d.beta * batch + d.delta)


Profile = Annotated[PangLinearProfile | BilinearProfile, Field(discriminator="family")]
FAMILIES = ("pang_linear", "bilinear")


class _ProfileDoc(BaseModel):
    profile: Profile


def models_dirs() -> list[Path]:
    """Folders searched for ``<name>.yaml``: ``$LLMOPT_MODELS`` (os.pathsep-separated), then the
    project's ``models/``."""
    dirs = [Path(p) for p in os.environ.get("LLMOPT_MODELS", "").split(os.pathsep) if p]
    dirs.append(Path(__file__).resolve().parent.parent / "models")
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
            f"unknown profile family (known: {', '.join(FAMILIES)})",
            file=file, field=f"{field}.family" if field else "family", value=family,
            has_value=True,
        )
    doc = validated(_ProfileDoc, {"profile": data}, file=file, prefix=field, error=ProfileError)
    return doc.profile


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
        known = ", ".join(available_profiles()) or "none"
        raise ProfileError(f"unknown profile (available: {known})", file=file, field=field,
                           value=ref)
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


def prefill_levels(profile: PangLinearProfile, max_tokens: int, step: int | None = None
                   ) -> list[tuple[int, float]]:
    """Prefill levels (N^cap_l, T^p_l) of the original MIP (eqs 5–7): level 0 with capacity 0 and
    time 0, then multiples of ``step`` up to ``max_tokens`` (the last level is ``max_tokens``)."""
    step = step or profile.prefill_level_step or max_tokens
    caps = [*list(range(step, max_tokens, step)), max_tokens]
    return [(0, 0.0)] + [(c, profile.prefill_stage_ms(c)) for c in caps]
