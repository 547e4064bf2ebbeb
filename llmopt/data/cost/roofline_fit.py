"""The roofline's fit to the InferMax form (Kim et al. 2025, section 3.2), the form every exact
model and bound of the infermax family uses: the batch shapes of the operating region, the
non-negative least-squares fit of the relative error and its error per region, and the fitted
``infermax`` profile ``llmopt profile roofline`` writes. The roofline itself is
``llmopt.data.cost.roofline``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from llmopt.data.cost.roofline import Roofline, efficiency_text, profile_fields

REGIONS = ("prefill-heavy", "decode-heavy", "mixed")
#: the InferMax form's coefficients, in the order of the fit's columns
COEFFICIENTS = ("bias_ms", "per_token_ms", "decode_kv_ms", "prefill_attention_ms",
                "per_prefill_request_ms")


@dataclass(frozen=True)
class Shape:
    """One batch shape of the operating region, by the aggregates an iteration is timed by."""

    region: str
    prefill_tokens: int
    decodes: int
    decode_kv: int
    units: int
    chunks: int

    def features(self) -> list[float]:
        """The InferMax form's columns: 1, tokens, KVs read by decodes, Σ(c² + 2mc), chunks."""
        return [1.0, self.prefill_tokens + self.decodes, self.decode_kv, self.units,
                self.chunks]


def _grid(low: int, high: int, points: int) -> list[int]:
    if high < low:
        return []
    return sorted({round(float(x)) for x in np.geomspace(low, high, points)})


def operating_region(max_batch_tokens: int, kv_capacity: int,
                     max_decodes: int = 512) -> Iterator[Shape]:
    """Batch shapes up to C = ``max_batch_tokens`` tokens and M = ``kv_capacity`` KVs:

    - prefill-heavy: 1, 2, 4 or 8 equal chunks of c tokens (16 ≤ c, chunks·c ≤ C) after m cached
      ones (m = 0, c, 4c, 16c while chunks·(m + c) ≤ M), no decodes;
    - decode-heavy: d decodes (1 ≤ d ≤ min(C, ``max_decodes``)) of mean context 16 .. 32K
      (d·context ≤ M), no prefill;
    - mixed: one chunk of c tokens (after 0 or 2048 cached) and d decodes, c + d ≤ C, the
      decodes' contexts as above."""
    C, M = max_batch_tokens, kv_capacity
    for chunks in (1, 2, 4, 8):
        for c in _grid(16, C // chunks, 12):
            for m in (0, c, 4 * c, 16 * c):
                if chunks * (m + c) <= M:
                    yield Shape("prefill-heavy", chunks * c, 0, 0, chunks * (c * c + 2 * m * c),
                                chunks)
    decode_counts = _grid(1, min(C, max_decodes), 12)
    for d in decode_counts:
        for context in _grid(16, min(32768, M // d), 10):
            yield Shape("decode-heavy", 0, d, d * context, 0, 0)
    for c in _grid(16, C - 1, 8):
        for m in (0, 2048):
            for d in (x for x in decode_counts if c + x <= C):
                for context in _grid(16, min(32768, (M - m - c) // d), 5):
                    yield Shape("mixed", c, d, d * context, c * c + 2 * m * c, 1)


def significant(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


@dataclass(frozen=True)
class RegionError:
    region: str
    shapes: int
    max_rel: float
    mean_rel: float


def fit_infermax(roofline: Roofline, shapes: list[Shape]) -> tuple[dict[str, float],
                                                                   list[RegionError]]:
    """The InferMax coefficients (non-negative, by ``scipy.optimize.nnls`` on rows scaled by
    the roofline's time, i.e. least squares of the relative error, each region weighing the
    same), rounded to four significant figures, and the rounded form's relative error per
    region."""
    features = np.array([s.features() for s in shapes], dtype=float)
    times = np.array([roofline.iteration_ms(s.prefill_tokens, s.decodes, s.decode_kv, s.units,
                                            s.chunks) for s in shapes])
    regions = np.array([s.region for s in shapes])
    # each region weighs the same, whatever its number of shapes
    weight = np.array([1 / np.sqrt((regions == r).sum()) for r in regions])
    scale = features.max(axis=0)  # columns of comparable size for the solver
    scale[scale == 0] = 1.0
    rows = features / scale * (weight / times)[:, None]
    solution, _ = nnls(rows, weight)
    coefficients = {k: significant(v) for k, v in zip(COEFFICIENTS, solution / scale,
                                                      strict=True)}
    predicted = features @ np.array([coefficients[k] for k in COEFFICIENTS])
    relative = np.abs(predicted - times) / times
    errors = [RegionError(r, int((regions == r).sum()), float(relative[regions == r].max()),
                          float(relative[regions == r].mean()))
              for r in REGIONS if (regions == r).any()]
    return coefficients, errors




def region_text(errors: list[RegionError]) -> str:
    return "; ".join(f"{e.region} (n = {e.shapes}) max {e.max_rel:.1%}, mean {e.mean_rel:.1%}"
                     for e in errors)


POOR_FIT_MEAN = 0.2


def poor_fit(errors: list[RegionError]) -> str:
    """A sentence naming the regions where the InferMax form fits the roofline poorly (mean
    relative error above ``POOR_FIT_MEAN``), empty when it fits everywhere."""
    poor = [e.region for e in errors if e.mean_rel > POOR_FIT_MEAN]
    if not poor:
        return ""
    return (f" The linear form fits poorly in the {', '.join(poor)} region"
            f"{'s' if len(poor) > 1 else ''} (mean error above {POOR_FIT_MEAN:.0%}): a mixture "
            "of experts reads more experts as the batch grows, and less than linearly; the "
            "roofline itself (llmopt.data.cost.roofline.Roofline, an IterationCosts) times "
            "such batches directly.")


def _fitted(roofline: Roofline, max_decodes: int
            ) -> tuple[int, list[Shape], dict[str, float], list[RegionError]]:
    """(KV capacity, the operating region's batch shapes, the InferMax coefficients fitted
    over them, the fit's errors per region)."""
    capacity = roofline.kv_capacity()
    shapes = list(operating_region(roofline.max_batch_tokens, capacity, max_decodes))
    coefficients, errors = fit_infermax(roofline, shapes)
    return capacity, shapes, coefficients, errors


def roofline_profile(roofline: Roofline, *, name: str, model_file: str, command: str,
                     max_decodes: int = 512) -> dict:
    """An ``infermax`` profile (a mapping, ready for YAML) fitted to ``roofline`` over its
    operating region (C = ``roofline.max_batch_tokens``, M = its KV capacity), the fit's error
    per region in ``source`` and the roofline's inputs in ``derivation``."""
    capacity, shapes, coefficients, errors = _fitted(roofline, max_decodes)
    source = (
        f"Roofline estimate (llmopt profile roofline) of {_model_text(roofline)}, fitted to the "
        f"InferMax form by non-negative least squares of the relative error over {len(shapes)} "
        f"batch shapes up to C = {roofline.max_batch_tokens} tokens and M = {capacity} KVs. "
        f"Fit error against the roofline (relative): {region_text(errors)}.{poor_fit(errors)} "
        f"{_facts_text(roofline)}")
    derivation = (
        f"{_derivation_text(roofline, model_file, command)} The model "
        f"is llmopt.data.cost.roofline; coefficients rounded to four significant figures, the "
        f"errors above are those of the rounded coefficients.")
    return {"name": name, "family": "infermax", "source": source, **coefficients,
            "kv_capacity": capacity, "max_batch_tokens": roofline.max_batch_tokens,
            "derivation": derivation}


def roofline_family_profile(roofline: Roofline, *, name: str, model_file: str, command: str,
                            max_decodes: int = 512) -> dict:
    """A ``roofline`` profile (a mapping, ready for YAML): ``roofline``'s inputs, timing every
    iteration with the roofline itself; its ``source`` states how far the InferMax form fitted
    over the same operating region is from it, per region (what the fitted profile loses)."""
    capacity, shapes, _, errors = _fitted(roofline, max_decodes)
    source = (
        f"Roofline estimate (llmopt profile roofline --family roofline) of "
        f"{_model_text(roofline)}; every iteration is timed by the roofline itself, not by a "
        f"fitted linear form. The InferMax form fitted to it over {len(shapes)} batch shapes up "
        f"to C = {roofline.max_batch_tokens} tokens and M = {capacity} KVs errs (relative) by: "
        f"{region_text(errors)}. The infermax family's policies replay on this profile; the "
        f"exact problems, bounds and SLO ceiling need the linear form: use the fitted profile "
        f"(the same command without --family roofline) for them. {_facts_text(roofline)}")
    derivation = (f"{_derivation_text(roofline, model_file, command)} The model is "
                  f"llmopt.data.cost.roofline, evaluated per iteration from the fields above.")
    return {"name": name, "family": "roofline", "source": source, **profile_fields(roofline),
            "derivation": derivation}


def _model_text(roofline: Roofline) -> str:
    a, g = roofline.arch, roofline.gpu
    moe = (f", a mixture of {a.experts} experts of which {a.experts_per_token} run per token"
           if a.is_moe else "")
    return (f"{a.name} ({a.total_params / 1e9:.2f}B parameters{moe}) on {roofline.tp} × "
            f"{g.name}, {roofline.dtype} weights")


def _facts_text(roofline: Roofline) -> str:
    g = roofline.gpu
    return (f"GPU facts: "
            f"{g.source}; {g.interconnect_source}. Efficiencies: {roofline.eff.calibration}. No "
            f"measurement of this model on this GPU was used: calibrate against measured batches "
            f"when possible.")


def _derivation_text(roofline: Roofline, model_file: str, command: str) -> str:
    a, g, eff = roofline.arch, roofline.gpu, roofline.eff
    capacity = roofline.kv_capacity()
    return (
        f"Command: {command}. Model config: {model_file} ({a.layers} layers, hidden "
        f"{a.hidden}, {a.q_heads} attention / {a.kv_heads} KV heads of {a.head_dim}, "
        f"{'expert ' if a.is_moe else ''}intermediate {a.intermediate}, vocabulary {a.vocab}). "
        f"GPU: {g.memory_gib:g} GiB, {g.hbm_tb_per_s:g} TB/s HBM, "
        f"{g.peak_tflops(roofline.dtype):g} TFLOP/s dense {roofline.dtype}, {g.interconnect} "
        f"{g.interconnect_gb_per_s:g} GB/s (both directions). Roofline: each kernel takes the "
        f"longest of FLOPs / (peak × MFU), bytes / (HBM × MBU) and a floor; "
        f"{efficiency_text(eff)}. Per GPU: weights {roofline.weights_gib():.2f} GiB, KV "
        f"{roofline.kv_bytes_per_token():,.0f} bytes a token, activation reserve "
        f"{roofline.activation_reserve_gib():.2f} GiB, so "
        f"M = ({eff.memory_utilization:g} × {g.memory_gib:g} − {roofline.weights_gib():.2f} − "
        f"{roofline.activation_reserve_gib():.2f}) GiB / KV bytes = {capacity} tokens.")


__all__ = ["COEFFICIENTS", "POOR_FIT_MEAN", "REGIONS", "RegionError", "Shape", "fit_infermax",
           "operating_region", "poor_fit", "region_text", "roofline_family_profile",
           "roofline_profile", "significant"]
