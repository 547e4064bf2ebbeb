"""A roofline estimate of an iteration's time from a model's architecture and a GPU's peaks, and
its fit to the InferMax form (Kim et al. 2025, section 3.2) that every exact model and bound of
the infermax family uses.

One iteration of a tensor-parallel group of ``tp`` GPUs processes P prompt tokens in ``chunks``
prefill chunks (Σ(c² + 2mc) = ``units``) and ``decodes`` decode tokens reading K = ``decode_kv``
cached KVs; N = P + decodes. Each kernel on one GPU takes the longest of its compute time (FLOPs
over peak × MFU; prefill tokens' FLOPs at ``mfu_prefill``, decode tokens' at ``mfu_decode``), its
memory time (bytes over HBM bandwidth × MBU; ``mbu_elementwise`` for kernels without FLOPs) and a
floor (launch and tail of a small kernel); the kernels run one after the other:

- per layer (``Roofline.layer_kernels``): the Q/K/V and O projections and the gated MLP's two
  GEMMs (2 FLOPs per weight and token; every weight read once, plus the GEMM's input and output
  activations), two norms, two residual adds, the rotary embedding, the MLP's activation and the
  KV write. A mixture of experts runs k of E experts per token and reads only the experts its
  tokens touch, E·(1 − (1 − k/E)^N) per layer when each token picks its k uniformly at random
  (an assumption: real routers are skewed), plus its router;
- the output head: one logit row per chunk and per decode;
- prefill attention: 2·head_dim·q_heads·layers FLOPs per unit of c² + 2mc (QKᵀ and AV over
  (c² + 2mc)/2 query-key pairs, 4·head_dim FLOPs each per head), at the compute roof;
- decode attention: per KV read, the longer of its bytes (K and V, kv_heads·head_dim·layers·2
  values) and its 4·head_dim·q_heads·layers FLOPs, so linear in K;
- tensor parallelism: two all-reduces of the hidden state per layer (after attention and after
  the MLP), ring all-reduce 2(tp − 1)/tp·N·hidden·2 bytes per GPU over one direction of the
  interconnect at ``link_efficiency``, plus a latency per all-reduce;
- an overhead per iteration (CPU side: scheduling, sampling), 0 unless given.

Weights, heads and the MLP's width are split evenly over the tp GPUs (tp must divide the
attention and the KV heads); norms and residual adds run in full on every GPU. Activations and
KV caches are 16-bit whatever the weights' dtype. KV capacity: ``memory_utilization`` of the
GPUs' memory less the weights and an activation reserve, over the KV bytes of a token.

The efficiencies' defaults per GPU (``llmopt/data/hardware/efficiency.csv``) are calibrated by
``bench/roofline_check.py`` on measured per-operator tables; the all-reduce's efficiency and
latency are assumptions (no measured collective is at hand).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import nnls

from llmopt.data.cost.hardware import DTYPES, GIB, Architecture, Gpu, hardware_dir
from llmopt.errors import OptionError

ACTIVATION_BYTES = 2      # activations and KV caches stay 16-bit, whatever the weights' dtype
REGIONS = ("prefill-heavy", "decode-heavy", "mixed")
#: the InferMax form's coefficients, in the order of the fit's columns
COEFFICIENTS = ("bias_ms", "per_token_ms", "decode_kv_ms", "prefill_attention_ms",
                "per_prefill_request_ms")


@dataclass(frozen=True)
class Efficiency:
    """The fractions of the peaks an iteration reaches and the fixed costs (see the module doc).
    Defaults per GPU: ``llmopt/data/hardware/efficiency.csv``, calibrated by
    ``bench/roofline_check.py`` on measured tables."""

    mfu_prefill: float
    mfu_decode: float
    mbu: float
    mbu_elementwise: float
    kernel_floor_ms: float
    overhead_ms: float = 0.0
    link_efficiency: float = 0.8
    allreduce_latency_ms: float = 0.01
    memory_utilization: float = 0.9
    calibration: str = ""


def default_efficiency(gpu: Gpu) -> Efficiency:
    """The calibrated efficiency of ``gpu`` (the ``default`` row for a GPU with no
    measurement)."""
    with (hardware_dir() / "efficiency.csv").open(newline="") as fh:
        rows = {r["gpu"]: r for r in csv.DictReader(fh)}
    row = rows.get(gpu.name, rows["default"])
    return Efficiency(mfu_prefill=float(row["mfu"]), mfu_decode=float(row["mfu"]),
                      mbu=float(row["mbu"]), mbu_elementwise=float(row["mbu_elementwise"]),
                      kernel_floor_ms=float(row["kernel_floor_ms"]),
                      calibration=row["calibration"])


def check_tensor_parallel(arch: Architecture, tp: int, file: str | Path | None = None) -> None:
    """Tensor parallelism splits the attention and the KV heads evenly: ``tp`` must divide
    both."""
    for heads, what in ((arch.q_heads, "attention"), (arch.kv_heads, "KV")):
        if tp < 1 or heads % tp:
            raise OptionError(f"tensor parallelism must divide the model's {heads} {what} "
                              "heads", file=file, field="--tp", value=tp)


@dataclass(frozen=True)
class Roofline:
    """The roofline of one model on ``tp`` GPUs of one kind (see the module doc). Implements
    the simulation's ``IterationCosts`` protocol (``llmopt.data.cost.base``)."""

    arch: Architecture
    gpu: Gpu
    tp: int
    dtype: str
    eff: Efficiency
    max_batch_tokens: int = 8192

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise OptionError(f"must be one of {', '.join(DTYPES)}", field="--dtype",
                              value=self.dtype)
        self.gpu.peak_tflops(self.dtype)  # refuses fp8 on a GPU without it
        check_tensor_parallel(self.arch, self.tp)
        for name in ("mfu_prefill", "mfu_decode", "mbu", "mbu_elementwise", "link_efficiency",
                     "memory_utilization"):
            value = getattr(self.eff, name)
            if not 0 < value <= 1:
                raise OptionError("must be in (0, 1]", field=f"--{name.replace('_', '-')}",
                                  value=value)

    # --- per-GPU constants ------------------------------------------------------------
    @property
    def weight_bytes(self) -> int:
        return DTYPES[self.dtype]

    @property
    def flops_per_ms(self) -> float:
        return self.gpu.peak_tflops(self.dtype) * 1e9

    @property
    def bytes_per_ms(self) -> float:
        return self.gpu.hbm_tb_per_s * 1e9 * self.eff.mbu

    def weights_gib(self) -> float:
        """Weights held by each GPU."""
        return self.arch.total_params * self.weight_bytes / self.tp / GIB

    def kv_bytes_per_token(self) -> float:
        """KV bytes of one token on each GPU."""
        return self.arch.kv_bytes_per_token(ACTIVATION_BYTES) / self.tp

    def activation_reserve_gib(self) -> float:
        """Memory kept for activations and the runtime on each GPU: 1 GiB (CUDA context,
        communication buffers, CUDA graphs) plus a batch of ``max_batch_tokens`` tokens' widest
        intermediate tensors (the hidden state thrice, the Q/K/V output, the MLP's two
        intermediate halves), 16-bit; vLLM measures this by a profiling run."""
        a, t = self.arch, self.tp
        width = 3 * a.hidden + ((a.q_heads + 2 * a.kv_heads) * a.head_dim
                                + 2 * a.intermediate * max(1, a.experts_per_token)) / t
        return 1.0 + self.max_batch_tokens * width * ACTIVATION_BYTES / GIB

    def kv_capacity(self) -> int:
        """KV tokens the group holds: ``memory_utilization`` of each GPU's memory less its
        weights and activation reserve, over its share of a token's KV bytes (0 when nothing
        is left)."""
        free = (self.eff.memory_utilization * self.gpu.memory_gib - self.weights_gib()
                - self.activation_reserve_gib())
        return max(0, math.floor(free * GIB / self.kv_bytes_per_token()))

    # --- one iteration ---------------------------------------------------------------
    def layer_kernels(self, prefill_tokens: int, decodes: int) -> list[tuple[str, float, float]]:
        """One layer's non-attention kernels on one GPU for a batch of ``prefill_tokens`` +
        ``decodes`` tokens: (name, time at the compute roof in ms, bytes moved). The weights of
        the projections are split over the tp GPUs, and so are the heads and the MLP's
        intermediate width; norms and residual adds run in full on every GPU."""
        a, t, w, x = self.arch, self.tp, self.weight_bytes, ACTIVATION_BYTES
        n = prefill_tokens + decodes
        flop_ms = (prefill_tokens / (self.flops_per_ms * self.eff.mfu_prefill)
                   + decodes / (self.flops_per_ms * self.eff.mfu_decode)) * 2 / t
        qkv = (a.q_heads + 2 * a.kv_heads) * a.head_dim
        out = a.q_heads * a.head_dim
        kernels = [
            ("qkv_proj", flop_ms * a.hidden * qkv,
             a.hidden * qkv * w / t + n * (a.hidden + qkv / t) * x),
            ("o_proj", flop_ms * out * a.hidden,
             out * a.hidden * w / t + n * (out / t + a.hidden) * x),
            ("norms", 0.0, 2 * 2 * n * a.hidden * x),
            ("rope", 0.0, 2 * n * (a.q_heads + a.kv_heads) * a.head_dim / t * x),
            ("residual_adds", 0.0, 2 * 3 * n * a.hidden * x),
            ("kv_write", 0.0, n * 2 * a.kv_heads * a.head_dim / t * x),
        ]
        width = a.intermediate
        if a.is_moe:
            k, e = a.experts_per_token, a.experts
            touched = e * (1 - (1 - k / e) ** n)  # experts read (expected, uniform routing)
            kernels.append(("router", flop_ms * t * a.hidden * e,  # not split over the GPUs
                            a.hidden * e * w + n * a.hidden * x))
        else:
            k, touched = 1, 1.0
        kernels += [
            ("gate_up_proj", flop_ms * k * a.hidden * 2 * width,
             touched * 2 * a.hidden * width * w / t + n * k * (a.hidden + 2 * width / t) * x),
            ("activation", 0.0, 3 * n * k * width / t * x),
            ("down_proj", flop_ms * k * width * a.hidden,
             touched * width * a.hidden * w / t + n * k * (width / t + a.hidden) * x),
        ]
        return kernels

    def kernel_ms(self, compute_ms: float, moved: float) -> float:
        """A kernel's time: the longest of its compute time, its memory time and the floor. A
        kernel without FLOPs (element-wise) moves its bytes at ``mbu_elementwise``."""
        bandwidth = self.bytes_per_ms if compute_ms else (
            self.gpu.hbm_tb_per_s * 1e9 * self.eff.mbu_elementwise)
        return max(compute_ms, moved / bandwidth, self.eff.kernel_floor_ms)

    def layer_ms(self, tokens: int) -> float:
        """One layer's non-attention time for ``tokens`` tokens (what a per-operator profiling
        table of one layer's non-attention operators measures)."""
        return sum(self.kernel_ms(c, b) for _, c, b in self.layer_kernels(tokens, 0))

    def parts(self, prefill_tokens: int, decodes: int, decode_kv: float, units: float,
              chunks: int) -> dict[str, float]:
        """The iteration's time (ms) by operator group (see the module doc)."""
        a, t, eff = self.arch, self.tp, self.eff
        tokens = prefill_tokens + decodes
        if tokens <= 0:
            return {}
        layers = a.layers * sum(self.kernel_ms(c, b)
                                for _, c, b in self.layer_kernels(prefill_tokens, decodes))
        rows = chunks + decodes  # logits: one row per chunk and per decode
        head_compute = 2 * a.head_params / t * (chunks / (self.flops_per_ms * eff.mfu_prefill)
                                                + decodes / (self.flops_per_ms * eff.mfu_decode))
        head = self.kernel_ms(head_compute, a.head_params * self.weight_bytes / t
                              + rows * a.vocab / t * ACTIVATION_BYTES)
        prefill_attention = (units * 2 * a.head_dim * a.q_heads * a.layers / t
                             / (self.flops_per_ms * eff.mfu_prefill))
        decode_attention = decode_kv * self.decode_kv_ms()
        attention_floor = a.layers * eff.kernel_floor_ms * ((chunks > 0) + (decodes > 0))
        if t > 1:
            ring = 2 * (t - 1) / t * tokens * a.hidden * ACTIVATION_BYTES
            link_bytes_per_ms = self.gpu.interconnect_gb_per_s / 2 * 1e6 * eff.link_efficiency
            allreduce = 2 * a.layers * (eff.allreduce_latency_ms + ring / link_bytes_per_ms)
        else:
            allreduce = 0.0
        return {"overhead": eff.overhead_ms, "layers": layers, "head": head,
                "attention": prefill_attention + decode_attention + attention_floor,
                "allreduce": allreduce}

    def decode_kv_ms(self) -> float:
        """Decode attention per cached KV read: the longer of its bytes and its FLOPs."""
        a = self.arch
        read = self.kv_bytes_per_token() / self.bytes_per_ms
        flops = 4 * a.head_dim * a.q_heads * a.layers / self.tp
        return max(read, flops / (self.flops_per_ms * self.eff.mfu_decode))

    def iteration_ms(self, prefill_tokens: int, decodes: int, decode_kv: float, units: float,
                     chunks: int) -> float:
        """The iteration's time (ms): the sum of :meth:`parts`; 0 for an empty iteration."""
        return sum(self.parts(prefill_tokens, decodes, decode_kv, units, chunks).values())

    def decode_iteration_costs(self, decodes: int) -> tuple[float, float]:
        """A decode-only iteration of ``decodes`` requests costs per_batch + per_kv · KVs read
        (decode attention is linear in the KVs read)."""
        return self.iteration_ms(0, decodes, 0.0, 0.0, 0), self.decode_kv_ms()


# --- the operating region and the fit -------------------------------------------------------
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


def with_overrides(eff: Efficiency, **values: float | None) -> Efficiency:
    """``eff`` with the values given (None keeps the default)."""
    given: dict[str, Any] = {k: v for k, v in values.items() if v is not None}
    return replace(eff, **given)


def efficiency_text(eff: Efficiency) -> str:
    shown = {k: v for k, v in asdict(eff).items() if k != "calibration"}
    return ", ".join(f"{k} = {v:g}" for k, v in shown.items())


__all__ = ["COEFFICIENTS", "REGIONS", "Efficiency", "RegionError", "Roofline", "Shape",
           "check_tensor_parallel", "default_efficiency", "efficiency_text", "fit_infermax",
           "operating_region", "poor_fit", "region_text", "roofline_profile", "significant",
           "with_overrides"]


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


def roofline_profile(roofline: Roofline, *, name: str, model_file: str, command: str,
                     max_decodes: int = 512) -> dict:
    """An ``infermax`` profile (a mapping, ready for YAML) fitted to ``roofline`` over its
    operating region (C = ``roofline.max_batch_tokens``, M = its KV capacity), the fit's error
    per region in ``source`` and the roofline's inputs in ``derivation``."""
    a, g, eff = roofline.arch, roofline.gpu, roofline.eff
    capacity = roofline.kv_capacity()
    shapes = list(operating_region(roofline.max_batch_tokens, capacity, max_decodes))
    coefficients, errors = fit_infermax(roofline, shapes)
    moe = (f", a mixture of {a.experts} experts of which {a.experts_per_token} run per token"
           if a.is_moe else "")
    source = (
        f"Roofline estimate (llmopt profile roofline) of {a.name} ({a.total_params / 1e9:.2f}B "
        f"parameters{moe}) on {roofline.tp} × {g.name}, {roofline.dtype} weights, fitted to the "
        f"InferMax form by non-negative least squares of the relative error over {len(shapes)} "
        f"batch shapes up to C = {roofline.max_batch_tokens} tokens and M = {capacity} KVs. "
        f"Fit error against the roofline (relative): {region_text(errors)}.{poor_fit(errors)} "
        f"GPU facts: "
        f"{g.source}; {g.interconnect_source}. Efficiencies: {eff.calibration}. No "
        f"measurement of this model on this GPU was used: calibrate against measured batches "
        f"when possible.")
    derivation = (
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
        f"{roofline.activation_reserve_gib():.2f}) GiB / KV bytes = {capacity} tokens. The model "
        f"is llmopt.data.cost.roofline; coefficients rounded to four significant figures, the "
        f"errors above are those of the rounded coefficients.")
    return {"name": name, "family": "infermax", "source": source, **coefficients,
            "kv_capacity": capacity, "max_batch_tokens": roofline.max_batch_tokens,
            "derivation": derivation}
