"""Building an InferMax profile from measurements: the non-attention line fitted to a profiling
table (Vidur's per-operator CSV layout) and the attention terms from a roofline estimate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from llmopt.errors import InputFileError


def fit_non_attention(csv: str | Path, layers: int, tensor_parallel: int = 1,
                      min_tokens: int = 1) -> dict[str, float]:
    """Least-squares line through the non-attention time of a model, from a Vidur-style
    per-operator profiling CSV: the ``*.median`` columns of one layer summed per
    ``num_tokens`` (rows of ``num_tensor_parallel_workers`` = ``tensor_parallel``), times
    ``layers``. Returns ``bias_ms``, ``per_token_ms``, ``r2`` and the number of ``points``."""
    path = Path(csv)
    if not path.is_file():
        raise InputFileError("profiling CSV not found", file=path)
    try:
        frame = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InputFileError(f"cannot parse CSV: {exc}".splitlines()[0], file=path) from exc
    medians = [c for c in frame.columns if str(c).endswith(".median")]
    for col in ("num_tokens", "num_tensor_parallel_workers"):
        if col not in frame:
            raise InputFileError(f"missing column {col!r}", file=path)
    if not medians:
        raise InputFileError("no '*.median' columns", file=path)
    for col in ("num_tokens", "num_tensor_parallel_workers", *medians):
        values = pd.to_numeric(frame[col], errors="coerce")
        bad = ~np.isfinite(values.to_numpy(dtype=float))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise InputFileError("must be a finite number", file=path,
                                 field=f"{col} (row {row})", value=frame[col].iloc[row],
                                 has_value=True)
        frame[col] = values
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
