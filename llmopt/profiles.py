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

    def iteration_ms(self, prefill_tokens: int, decodes: int, decode_kv: float, units: float,
                     chunks: int) -> float:
        """An iteration of the simulation: a prefill stage or a decode round (PD competition
        never mixes them)."""
        if prefill_tokens and decodes:
            raise ValueError("the stage model has no iteration mixing prefill and decode")
        if prefill_tokens:
            return self.prefill_stage_ms(prefill_tokens)
        return self.decode_round_ms(decodes)

    def decode_iteration_costs(self, decodes: int) -> tuple[float, float]:
        """A decode-only iteration of ``decodes`` requests costs per_batch + per_kv · KVs read:
        (per_batch, per_kv)."""
        return self.decode_round_ms(decodes), 0.0


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


class InferMaxProfile(CostProfile):
    """Batch-time model of InferMax (Kim et al. 2025, section 3.2).

    T(B) = bias + per_token · Σ c  (non-attention: tokens processed, 1 per decode request)
           + decode_kv · Σ_decode m  (decode attention: KVs read)
           + prefill_attention · Σ_prefill (c² + 2mc)  (prefill/refill chunks of c tokens
             after m already in the cache)
           + per_prefill_request · (prefill/refill requests in the batch)
    for a non-empty batch; 0 for an empty one.
    """

    family: Literal["infermax"]
    bias_ms: NonNegFloat
    per_token_ms: NonNegFloat
    decode_kv_ms: NonNegFloat
    prefill_attention_ms: NonNegFloat
    per_prefill_request_ms: NonNegFloat
    kv_capacity: PositiveInt | None = None
    max_batch_tokens: PositiveInt | None = None
    derivation: str | None = None

    def batch_ms(self, tokens: float, decode_kv: float, prefill_units: float,
                 prefill_requests: int) -> float:
        """Time of one batch from its aggregates (see the class docstring)."""
        if tokens <= 0:
            return 0.0
        return (self.bias_ms + self.per_token_ms * tokens + self.decode_kv_ms * decode_kv
                + self.prefill_attention_ms * prefill_units
                + self.per_prefill_request_ms * prefill_requests)

    def iteration_ms(self, prefill_tokens: int, decodes: int, decode_kv: float, units: float,
                     chunks: int) -> float:
        """An iteration of the simulation (``batch_ms`` of its aggregates)."""
        return self.batch_ms(prefill_tokens + decodes, decode_kv, units, chunks)

    def decode_iteration_costs(self, decodes: int) -> tuple[float, float]:
        """A decode-only iteration of ``decodes`` requests costs per_batch + per_kv · KVs read:
        (per_batch, per_kv), summed in ``batch_ms``'s order."""
        return self.bias_ms + self.per_token_ms * decodes, self.decode_kv_ms


Profile = Annotated[PangLinearProfile | BilinearProfile | InferMaxProfile,
                    Field(discriminator="family")]
FAMILIES = ("pang_linear", "bilinear", "infermax")


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


def fit_non_attention(csv: str | Path, layers: int, tensor_parallel: int = 1,
                      min_tokens: int = 1) -> dict[str, float]:
    """Least-squares line through the non-attention time of a model, from a Vidur-style
    per-operator profiling CSV: the ``*.median`` columns of one layer summed per
    ``num_tokens`` (rows of ``num_tensor_parallel_workers`` = ``tensor_parallel``), times
    ``layers``. Returns ``bias_ms``, ``per_token_ms``, ``r2`` and the number of ``points``."""
    import numpy as np
    import pandas as pd

    from llmopt.errors import InputFileError

    path = Path(csv)
    if not path.is_file():
        raise InputFileError("profiling CSV not found", file=path)
    frame = pd.read_csv(path)
    medians = [c for c in frame.columns if c.endswith(".median")]
    for col in ("num_tokens", "num_tensor_parallel_workers"):
        if col not in frame:
            raise InputFileError(f"missing column {col!r}", file=path)
    if not medians:
        raise InputFileError("no '*.median' columns", file=path)
    rows = frame[(frame["num_tensor_parallel_workers"] == tensor_parallel)
                 & (frame["num_tokens"] >= min_tokens)]
    if len(rows) < 2:
        raise InputFileError(f"fewer than two rows with tensor parallelism {tensor_parallel}",
                             file=path)
    x = rows["num_tokens"].to_numpy(dtype=float)
    y = rows[medians].sum(axis=1).to_numpy(dtype=float) * layers
    A = np.vstack([np.ones_like(x), x]).T
    (bias, slope), *_ = np.linalg.lstsq(A, y, rcond=None)
    resid = y - A @ np.array([bias, slope])
    r2 = 1 - float((resid ** 2).sum()) / float(((y - y.mean()) ** 2).sum())
    return {"bias_ms": float(bias), "per_token_ms": float(slope), "r2": r2,
            "points": len(rows)}


def roofline_attention(layers: int, q_heads: int, kv_heads: int, head_dim: int,
                       gpus: int, hbm_tb_s: float, peak_tflops: float,
                       bytes_per_value: int = 2) -> dict[str, float]:
    """Attention terms from a roofline estimate (ideal bandwidth and peak FLOPs).

    - decode attention reads every cached KV once: K and V, ``kv_heads × head_dim`` values
      each, per layer; the KV heads are sharded over ``gpus``, which read in parallel;
    - prefill attention of a chunk of c tokens after m cached ones does QKᵀ and AV for
      Σ_{t=1..c}(m + t) ≈ (c² + 2mc)/2 query-key pairs per head and layer, 4·head_dim FLOPs
      each, spread over ``gpus``."""
    kv_bytes = 2 * layers * kv_heads * head_dim * bytes_per_value
    decode_kv_ms = kv_bytes / gpus / (hbm_tb_s * 1e12) * 1e3
    flops_per_unit = 2 * head_dim * q_heads * layers
    prefill_ms = flops_per_unit / (gpus * peak_tflops * 1e12) * 1e3
    return {"kv_bytes_per_token": kv_bytes, "decode_kv_ms": decode_kv_ms,
            "prefill_flops_per_unit": flops_per_unit, "prefill_attention_ms": prefill_ms}


def infermax_profile_from_profiling(
    csv: str | Path, *, name: str, layers: int, q_heads: int, kv_heads: int, head_dim: int,
    tensor_parallel: int = 1, hbm_tb_s: float, peak_tflops: float,
    per_prefill_request_ms: float, kv_capacity: int | None, max_batch_tokens: int | None,
    source: str,
) -> dict:
    """An ``infermax`` profile (as a mapping, ready for YAML): the non-attention line fitted to
    a profiling CSV (:func:`fit_non_attention`) and the attention terms from the roofline
    (:func:`roofline_attention`), with the derivation written out."""
    fit = fit_non_attention(csv, layers, tensor_parallel)
    roof = roofline_attention(layers, q_heads, kv_heads, head_dim, tensor_parallel, hbm_tb_s,
                              peak_tflops)
    derivation = (
        f"Non-attention: least-squares line through {fit['points']} rows of {Path(csv).name} "
        f"(num_tensor_parallel_workers = {tensor_parallel}): the '*.median' operator times of "
        f"one layer summed, times {layers} layers; R² = {fit['r2']:.4f}. "
        f"Decode attention (roofline, memory-bound): each cached token holds K and V for "
        f"{kv_heads} KV heads × {head_dim} dims × {layers} layers × 2 bytes = "
        f"{roof['kv_bytes_per_token']:,} bytes, read once per decode step over "
        f"{tensor_parallel} GPU(s) at {hbm_tb_s} TB/s: {roof['decode_kv_ms']:.4e} ms per KV. "
        f"Prefill attention (roofline, compute-bound): a chunk of c tokens after m cached ones "
        f"costs QKᵀ and AV over Σ(m+t) ≈ (c² + 2mc)/2 pairs, 4 × {head_dim} FLOPs each, for "
        f"{q_heads} heads × {layers} layers = {roof['prefill_flops_per_unit']:,} FLOPs per unit "
        f"of c² + 2mc at {peak_tflops} TFLOP/s × {tensor_parallel} GPU(s): "
        f"{roof['prefill_attention_ms']:.4e} ms per unit. The attention terms are rounded to "
        f"four significant figures (more than a roofline estimate can claim). Per prefill "
        f"request: "
        f"{per_prefill_request_ms} ms, an order-of-magnitude estimate of the attention kernel's "
        f"extra thread-block waves per request (no attention profile was available); "
        f"calibrate it against measured batches when possible."
    )
    return {
        "name": name, "family": "infermax", "source": source,
        "bias_ms": round(fit["bias_ms"], 6), "per_token_ms": round(fit["per_token_ms"], 8),
        "decode_kv_ms": float(f"{roof['decode_kv_ms']:.4g}"),
        "prefill_attention_ms": float(f"{roof['prefill_attention_ms']:.4g}"),
        "per_prefill_request_ms": per_prefill_request_ms,
        "kv_capacity": kv_capacity, "max_batch_tokens": max_batch_tokens,
        "derivation": derivation,
    }
