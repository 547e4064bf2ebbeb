"""The facts a roofline estimate reads: a model's architecture from its Hugging Face
``config.json`` and a GPU's datasheet peaks (the table bundled in ``llmopt/data/hardware/``,
whose README names every figure's source).

Architecture counts, per layer (``h`` hidden size, ``q``/``kv`` attention/KV heads of ``d``
dimensions, ``I`` intermediate size): attention projections h·q·d (Q) + 2·h·kv·d (K, V) + q·d·h
(O); a gated (SwiGLU) MLP 3·h·I; a mixture-of-experts layer E experts of 3·h·I_e and a router
h·E, of which ``experts_per_token`` run per token. Norms and biases are left out (under 0.1 % of
the weights of every bundled model).
"""

from __future__ import annotations

import csv
import difflib
import json
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from llmopt.errors import InputFileError, OptionError
from llmopt.files import read_text

GIB = 2**30
#: the architectures whose config.json the estimate reads (decoder-only, grouped-query
#: attention, SwiGLU MLP; Mixtral and Qwen3-MoE experts)
KNOWN_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe")
DTYPES = {"bf16": 2, "fp16": 2, "fp8": 1}  # bytes per weight


def hardware_dir() -> Path:
    return Path(str(files("llmopt.data") / "hardware"))


@dataclass(frozen=True)
class Gpu:
    """One line of the bundled GPU table (datasheet figures, no sparsity)."""

    name: str
    memory_gib: float
    hbm_tb_per_s: float
    bf16_dense_tflops: float
    fp8_dense_tflops: float
    interconnect: str
    interconnect_gb_per_s: float  # the datasheet's figure: both directions added
    source: str
    interconnect_source: str
    bf16: bool = True  # V100: fp16 tensor cores only

    def peak_tflops(self, dtype: str) -> float:
        """Dense tensor peak for ``dtype`` (bf16 and fp16 share the 16-bit figure)."""
        if dtype == "bf16" and not self.bf16:
            raise OptionError(f"{self.name} has no bf16 tensor cores (its datasheet lists "
                              "fp16): use fp16", field="--dtype", value=dtype)
        if dtype == "fp8":
            if self.fp8_dense_tflops <= 0:
                raise OptionError(f"{self.name} has no fp8 tensor cores (its datasheet lists "
                                  "none): use bf16", field="--dtype", value=dtype)
            return self.fp8_dense_tflops
        return self.bf16_dense_tflops


def gpu_table() -> dict[str, Gpu]:
    with (hardware_dir() / "gpus.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {r["gpu"]: Gpu(r["gpu"], float(r["memory_gib"]), float(r["hbm_tb_per_s"]),
                          float(r["bf16_dense_tflops"]), float(r["fp8_dense_tflops"]),
                          r["interconnect"], float(r["interconnect_gb_per_s"]), r["source"],
                          r["interconnect_source"], r["bf16"] == "1") for r in rows}


def find_gpu(name: str) -> Gpu:
    """The bundled GPU ``name`` (case-insensitive); an unknown name is refused with the closest
    known ones."""
    table = gpu_table()
    by_lower = {k.lower(): v for k, v in table.items()}
    if name.lower() in by_lower:
        return by_lower[name.lower()]
    close = difflib.get_close_matches(name.upper(), list(table), n=2, cutoff=0.4)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise OptionError(f"unknown GPU ({hint}known: {', '.join(table)})", field="--gpu",
                      value=name)


@dataclass(frozen=True)
class Architecture:
    """What a roofline estimate needs of a model (see the module doc for the counts)."""

    name: str
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    intermediate: int            # dense MLP width, or one expert's for a mixture of experts
    vocab: int
    tied_embeddings: bool
    experts: int = 0             # 0: a dense model
    experts_per_token: int = 0

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def attention_params(self) -> int:
        """Q, K, V and O projections of one layer."""
        h, d = self.hidden, self.head_dim
        return h * self.q_heads * d + 2 * h * self.kv_heads * d + self.q_heads * d * h

    @property
    def mlp_params(self) -> int:
        """One dense gated MLP, or one expert."""
        return 3 * self.hidden * self.intermediate

    @property
    def layer_params(self) -> int:
        """Every weight of one layer (all experts and the router of an MoE layer)."""
        if self.is_moe:
            return (self.attention_params + self.experts * self.mlp_params
                    + self.hidden * self.experts)
        return self.attention_params + self.mlp_params

    @property
    def active_layer_params(self) -> int:
        """The weights one token multiplies in one layer."""
        if self.is_moe:
            return (self.attention_params + self.experts_per_token * self.mlp_params
                    + self.hidden * self.experts)
        return self.attention_params + self.mlp_params

    @property
    def head_params(self) -> int:
        """The output head (vocabulary × hidden)."""
        return self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        embeddings = 0 if self.tied_embeddings else self.head_params
        return self.layers * self.layer_params + self.head_params + embeddings

    def kv_bytes_per_token(self, kv_bytes: int = 2) -> int:
        """K and V of every layer for one token (all KV heads)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * kv_bytes


def _integer(config: dict[str, Any], key: str, path: Path, default: int | None = None) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputFileError("must be a positive integer", file=path, field=key, value=value,
                             has_value=True)
    return value


def load_architecture(path: str | Path) -> Architecture:
    """An :class:`Architecture` from a Hugging Face ``config.json``: dense decoders (Llama,
    Mistral, Qwen2/3) and mixtures of experts (Mixtral, Qwen3-MoE); anything else (multi-head
    latent attention, shared experts, dense layers between sparse ones) is refused."""
    path = Path(path)
    try:
        config = json.loads(read_text(path, "model config"))
    except json.JSONDecodeError as exc:
        raise InputFileError(f"not valid JSON: {exc.msg} at line {exc.lineno}",
                             file=path) from None
    if not isinstance(config, dict):
        raise InputFileError("a model config must be a JSON object", file=path)
    model_type = config.get("model_type")
    if model_type not in KNOWN_MODEL_TYPES:
        raise InputFileError(f"architecture not modelled (known: {', '.join(KNOWN_MODEL_TYPES)})",
                             file=path, field="model_type", value=model_type, has_value=True)
    for key in ("kv_lora_rank", "n_shared_experts", "first_k_dense_replace"):
        if config.get(key):
            raise InputFileError("not modelled (multi-head latent attention or shared/dense "
                                 "expert layers)", file=path, field=key, value=config[key])
    if config.get("mlp_only_layers") or config.get("decoder_sparse_step", 1) != 1:
        raise InputFileError("dense layers between sparse ones are not modelled", file=path,
                             field="mlp_only_layers", value=config.get("mlp_only_layers"))
    hidden = _integer(config, "hidden_size", path)
    q_heads = _integer(config, "num_attention_heads", path)
    kv_heads = _integer(config, "num_key_value_heads", path, q_heads)
    if hidden % q_heads and "head_dim" not in config:
        raise InputFileError("hidden_size is not a multiple of num_attention_heads and no "
                             "head_dim is given", file=path, field="head_dim")
    head_dim = _integer(config, "head_dim", path, hidden // q_heads)
    if q_heads % kv_heads:
        raise InputFileError(f"must divide num_attention_heads ({q_heads})", file=path,
                             field="num_key_value_heads", value=kv_heads)
    experts = config.get("num_local_experts", config.get("num_experts", 0)) or 0
    arch = Architecture(
        name=path.name.removesuffix(".json").removesuffix(".config"),
        layers=_integer(config, "num_hidden_layers", path), hidden=hidden, q_heads=q_heads,
        kv_heads=kv_heads, head_dim=head_dim,
        intermediate=_integer(config, "moe_intermediate_size" if "moe_intermediate_size" in config
                              else "intermediate_size", path),
        vocab=_integer(config, "vocab_size", path),
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        experts=_integer(config, "num_local_experts" if "num_local_experts" in config
                         else "num_experts", path) if experts else 0,
        experts_per_token=_integer(config, "num_experts_per_tok", path) if experts else 0,
    )
    if arch.experts_per_token > arch.experts:
        raise InputFileError(f"more than the {arch.experts} experts", file=path,
                             field="num_experts_per_tok", value=arch.experts_per_token)
    return arch


def bundled_configs() -> list[Path]:
    """The model configs shipped with llmopt (``llmopt/data/hardware/models``)."""
    return sorted((hardware_dir() / "models").glob("*.config.json"))


__all__ = ["DTYPES", "GIB", "Architecture", "Gpu", "bundled_configs", "find_gpu", "gpu_table",
           "hardware_dir", "load_architecture"]
