"""``llmopt fit-profile``: an InferMax cost profile from a profiling table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmopt.cli.common import check_number, check_out_dir, command, write_or_print
from llmopt.data.cost import profile_yaml
from llmopt.data.cost.fit import infermax_profile_from_profiling


@command
def fit_profile(
    csv: Annotated[Path, typer.Argument(help="Vidur-style per-operator profiling CSV.",
                                        show_default=False)],
    name: Annotated[str, typer.Option(help="Profile name.")],
    layers: Annotated[int, typer.Option(help="Transformer layers.")],
    q_heads: Annotated[int, typer.Option(help="Attention (query) heads.")],
    kv_heads: Annotated[int, typer.Option(help="KV heads (= q-heads without GQA).")],
    head_dim: Annotated[int, typer.Option(help="Dimensions per head.")] = 128,
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel GPUs.")] = 1,
    hbm_tb_s: Annotated[float, typer.Option(help="HBM bandwidth per GPU, TB/s.")] = 2.039,
    peak_tflops: Annotated[float, typer.Option(help="Peak FP16 TFLOP/s per GPU.")] = 312.0,
    per_prefill_request_ms: Annotated[float, typer.Option()] = 0.02,
    kv_capacity: Annotated[int | None, typer.Option(help="M, KV tokens.")] = None,
    max_batch_tokens: Annotated[int | None, typer.Option(help="C, tokens per batch.")] = None,
    source: Annotated[str, typer.Option(help="Where the profiling data come from.")] = "",
    out_file: Annotated[Path | None, typer.Option("--out", help="YAML file to write.")] = None,
) -> None:
    """Build an InferMax cost profile: the non-attention line fitted to a profiling CSV, the
    attention terms from a roofline estimate, the derivation written into the profile."""
    for option, value in (("--layers", layers), ("--q-heads", q_heads), ("--kv-heads", kv_heads),
                          ("--head-dim", head_dim), ("--tp", tp), ("--hbm-tb-s", hbm_tb_s),
                          ("--peak-tflops", peak_tflops), ("--kv-capacity", kv_capacity),
                          ("--max-batch-tokens", max_batch_tokens)):
        check_number(value, option)
    check_number(per_prefill_request_ms, "--per-prefill-request-ms", zero_ok=True)
    if out_file:
        check_out_dir(out_file.parent)
    data = infermax_profile_from_profiling(
        csv, name=name, layers=layers, q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim,
        tensor_parallel=tp, hbm_tb_s=hbm_tb_s, peak_tflops=peak_tflops,
        per_prefill_request_ms=per_prefill_request_ms, kv_capacity=kv_capacity,
        max_batch_tokens=max_batch_tokens, source=source or f"fitted to {csv.name}")
    write_or_print(profile_yaml(data, file=csv), out_file)
