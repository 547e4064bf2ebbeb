"""A roofline estimate of an iteration's time from a model's architecture and a GPU's peaks, and
the ``roofline`` profile family that times the simulation's iterations with it directly. Its fit
to the InferMax form (Kim et al. 2025, section 3.2), the form every exact model and bound of the
infermax family uses, is ``llmopt.data.cost.roofline_fit``.

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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator

from llmopt.data.cost.base import CostProfile, NonNegFloat, Tokens, _Strict
from llmopt.data.cost.hardware import DTYPES, GIB, Architecture, Gpu, hardware_dir
from llmopt.errors import OptionError

ACTIVATION_BYTES = 2      # activations and KV caches stay 16-bit, whatever the weights' dtype


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


def with_overrides(eff: Efficiency, **values: float | None) -> Efficiency:
    """``eff`` with the values given (None keeps the default)."""
    given: dict[str, Any] = {k: v for k, v in values.items() if v is not None}
    return replace(eff, **given)


def efficiency_text(eff: Efficiency) -> str:
    shown = {k: v for k, v in asdict(eff).items() if k != "calibration"}
    return ", ".join(f"{k} = {v:g}" for k, v in shown.items())


# --- the roofline profile family ------------------------------------------------------------
Count = Annotated[int, Field(ge=1, le=10**7)]
Fraction = Annotated[float, Field(gt=0, le=1)]


class ArchitectureFields(_Strict):
    """A model's architecture as ``config.json`` gives it (``hardware.Architecture``)."""

    name: str = Field(min_length=1)
    layers: Count
    hidden: Count
    q_heads: Count
    kv_heads: Count
    head_dim: Count
    intermediate: Count  # dense MLP width, or one expert's
    vocab: Count
    tied_embeddings: bool
    experts: Annotated[int, Field(ge=0, le=10**4)] = 0  # 0: a dense model
    experts_per_token: Annotated[int, Field(ge=0, le=10**4)] = 0

    @field_validator("kv_heads")
    @classmethod
    def _divides_heads(cls, kv_heads: int, info: ValidationInfo) -> int:
        q_heads = info.data.get("q_heads")
        if q_heads is not None and q_heads % kv_heads:
            raise ValueError(f"must divide q_heads ({q_heads})")
        return kv_heads

    @field_validator("experts_per_token")
    @classmethod
    def _within_experts(cls, k: int, info: ValidationInfo) -> int:
        experts = info.data.get("experts")
        if experts is not None and (k > experts or (experts > 0) != (k > 0)):
            raise ValueError(f"must be between 1 and experts ({experts}) for a mixture of "
                             "experts, 0 for a dense model")
        return k


class GpuFields(_Strict):
    """A GPU's datasheet peaks (a line of ``llmopt/data/hardware/gpus.csv``)."""

    name: str = Field(min_length=1)
    memory_gib: Annotated[float, Field(gt=0, le=1e4)]
    hbm_tb_per_s: Annotated[float, Field(gt=0, le=1e3)]
    bf16_dense_tflops: Annotated[float, Field(gt=0, le=1e6)]
    fp8_dense_tflops: Annotated[float, Field(ge=0, le=1e6)]  # 0: no fp8 tensor cores
    interconnect: str = Field(min_length=1)
    interconnect_gb_per_s: Annotated[float, Field(gt=0, le=1e6)]  # both directions added
    bf16: bool = True  # False: fp16 tensor cores only


class EfficiencyFields(_Strict):
    """The fractions of the peaks an iteration reaches and its fixed costs (``Efficiency``)."""

    mfu_prefill: Fraction
    mfu_decode: Fraction
    mbu: Fraction
    mbu_elementwise: Fraction
    kernel_floor_ms: NonNegFloat
    overhead_ms: NonNegFloat = 0.0
    link_efficiency: Fraction = 0.8
    allreduce_latency_ms: NonNegFloat = 0.01
    memory_utilization: Fraction = 0.9


class RooflineProfile(CostProfile):
    """The roofline itself as a cost profile: every iteration of the simulation is timed by
    :class:`Roofline` (see the module doc) from the architecture, GPU peaks, tensor parallelism,
    weights' dtype and efficiencies held in the profile. It times the same iterations as the
    infermax family (chunks of c tokens after m cached, Σ(c² + 2mc), decodes reading their KVs,
    the first output token from the prefill), so the infermax family's policies replay on it;
    the exact problems, bounds and SLO ceiling need the InferMax linear form and do not."""

    family: Literal["roofline"]
    architecture: ArchitectureFields
    gpu: GpuFields
    tp: Count
    dtype: Literal["bf16", "fp16", "fp8"]
    efficiency: EfficiencyFields
    kv_capacity: Tokens
    max_batch_tokens: Tokens
    derivation: str | None = None
    _roofline: Roofline = PrivateAttr()

    @field_validator("tp")
    @classmethod
    def _divides_heads(cls, tp: int, info: ValidationInfo) -> int:
        arch = info.data.get("architecture")
        if arch is not None:
            for heads, what in ((arch.q_heads, "q_heads"), (arch.kv_heads, "kv_heads")):
                if heads % tp:
                    raise ValueError(f"tensor parallelism must divide the {what} ({heads})")
        return tp

    @field_validator("dtype")
    @classmethod
    def _on_the_gpu(cls, dtype: str, info: ValidationInfo) -> str:
        gpu = info.data.get("gpu")
        if gpu is not None and dtype == "fp8" and gpu.fp8_dense_tflops <= 0:
            raise ValueError(f"{gpu.name} has no fp8 tensor cores (fp8_dense_tflops is 0)")
        if gpu is not None and dtype == "bf16" and not gpu.bf16:
            raise ValueError(f"{gpu.name} has no bf16 tensor cores (bf16 is false): use fp16")
        return dtype

    def model_post_init(self, context: Any, /) -> None:
        self._roofline = self.roofline()

    def roofline(self) -> Roofline:
        """The roofline these fields describe (a new one each call)."""
        return Roofline(Architecture(**self.architecture.model_dump()),
                        Gpu(**self.gpu.model_dump(), source="", interconnect_source=""),
                        self.tp, self.dtype, Efficiency(**self.efficiency.model_dump()),
                        self.max_batch_tokens)

    def iteration_ms(self, prefill_tokens: int, decodes: int, decode_kv: float, units: float,
                     chunks: int) -> float:
        """An iteration of the simulation: :meth:`Roofline.iteration_ms`."""
        return self._roofline.iteration_ms(prefill_tokens, decodes, decode_kv, units, chunks)

    def decode_iteration_costs(self, decodes: int) -> tuple[float, float]:
        """A decode-only iteration of ``decodes`` requests costs per_batch + per_kv · KVs read:
        :meth:`Roofline.decode_iteration_costs`."""
        return self._roofline.decode_iteration_costs(decodes)

    def chunked_prefill_ms(self, prompt_tokens: Sequence[float], chunk: int) -> list[float]:
        """Each prompt prefilled alone in chunks of ``chunk`` tokens, one per iteration: the
        roofline's iterations summed (the k-th chunk of c tokens after m = k·chunk cached)."""
        times = []
        for prompt in prompt_tokens:
            total, done, left = 0.0, 0, int(prompt)
            while left > 0:
                c = min(chunk, left)
                total += self._roofline.iteration_ms(c, 0, 0.0, c * c + 2 * done * c, 1)
                done, left = done + c, left - c
            times.append(total)
        return times

    @property
    def policy_family(self) -> str:
        return "infermax"


def profile_fields(roofline: Roofline) -> dict[str, Any]:
    """The fields of a ``roofline`` profile that describe ``roofline`` (ready for YAML), its
    KV capacity computed (``Roofline.kv_capacity``)."""
    gpu = {k: v for k, v in asdict(roofline.gpu).items()
           if k not in ("source", "interconnect_source")}
    efficiency = {k: v for k, v in asdict(roofline.eff).items() if k != "calibration"}
    return {"architecture": asdict(roofline.arch), "gpu": gpu, "tp": roofline.tp,
            "dtype": roofline.dtype, "efficiency": efficiency,
            "kv_capacity": roofline.kv_capacity(),
            "max_batch_tokens": roofline.max_batch_tokens}


__all__ = ["ArchitectureFields", "Efficiency", "EfficiencyFields", "GpuFields", "Roofline",
           "RooflineProfile", "check_tensor_parallel", "default_efficiency", "efficiency_text",
           "profile_fields", "with_overrides"]
