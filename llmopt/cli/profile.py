"""``llmopt profile roofline``: a cost profile for a model on a GPU, from the model's
``config.json`` and the GPU's datasheet peaks (``llmopt.data.cost.roofline``): the InferMax form
fitted to the roofline (``llmopt.data.cost.roofline_fit``), or the roofline itself
(``--family roofline``)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from llmopt.cli.common import check_number, check_out_dir, command, write_or_print
from llmopt.cli.usage import OneLineUsageErrors
from llmopt.data.cost import profile_yaml
from llmopt.data.cost.hardware import DTYPES, find_gpu, gpu_table, load_architecture
from llmopt.data.cost.roofline import (
    Roofline,
    check_tensor_parallel,
    default_efficiency,
    with_overrides,
)
from llmopt.data.cost.roofline_fit import roofline_family_profile, roofline_profile
from llmopt.errors import OptionError
from llmopt.files import is_safe_name

#: the profile each --family writes
BUILDERS = {"infermax": roofline_profile, "roofline": roofline_family_profile}

app = typer.Typer(cls=OneLineUsageErrors, no_args_is_help=True,
                  help="Build cost profiles without profiling data.")


@app.command()
@command
def roofline(
    model: Annotated[Path, typer.Option("--model", help="The model's Hugging Face config.json "
                                        "(bundled: llmopt/data/hardware/models/).",
                                        show_default=False)],
    gpu: Annotated[str, typer.Option(help="GPU of the bundled table: "
                                     + ", ".join(gpu_table()) + ".", show_default=False)],
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel GPUs.")] = 1,
    dtype: Annotated[str, typer.Option(help=f"Weights: {', '.join(DTYPES)} (KV caches and "
                                       "activations stay 16-bit).")] = "bf16",
    max_batch_tokens: Annotated[int, typer.Option(help="C: tokens per iteration.")] = 8192,
    max_decodes: Annotated[int, typer.Option(help="Largest decode batch of the fitted "
                                             "region.")] = 512,
    mfu_prefill: Annotated[float | None, typer.Option(help="Fraction of the peak FLOP/s "
                                                      "prefill reaches (default: the GPU's "
                                                      "calibration).")] = None,
    mfu_decode: Annotated[float | None, typer.Option(help="The same for decodes.")] = None,
    mbu: Annotated[float | None, typer.Option(help="Fraction of the HBM bandwidth weight and "
                                              "KV reads reach.")] = None,
    overhead_ms: Annotated[float | None, typer.Option(help="Fixed time per iteration (CPU "
                                                      "side; default 0).")] = None,
    memory_utilization: Annotated[float | None, typer.Option(
        help="Share of the GPU memory the engine takes (default 0.9, vLLM's).")] = None,
    family: Annotated[str, typer.Option(
        help="infermax: the InferMax form fitted to the roofline (what the exact problems, "
        "bounds and SLO ceiling need); roofline: the roofline itself times every iteration "
        "(the infermax family's policies replay on it; for where the fit is poor, see the "
        "fitted profile's source).")] = "infermax",
    name: Annotated[str | None, typer.Option(help="Profile name (default: the --out file's "
                                             "stem).")] = None,
    out_file: Annotated[Path | None, typer.Option("--out", help="YAML file to write "
                                                  "(default: standard output).")] = None,
) -> None:
    """A roofline estimate of an iteration's time (FLOPs, weight and KV bytes, all-reduces)
    fitted to the InferMax form over the operating region, with the fit's error per region in
    the profile's source; with --family roofline, the roofline itself as the profile."""
    for option, value in (("--tp", tp), ("--max-batch-tokens", max_batch_tokens),
                          ("--max-decodes", max_decodes), ("--mfu-prefill", mfu_prefill),
                          ("--mfu-decode", mfu_decode), ("--mbu", mbu),
                          ("--memory-utilization", memory_utilization)):
        check_number(value, option)
    check_number(overhead_ms, "--overhead-ms", zero_ok=True)
    if dtype not in DTYPES:
        raise OptionError(f"must be one of {', '.join(DTYPES)}", field="--dtype", value=dtype)
    if family not in BUILDERS:
        raise OptionError(f"must be one of {', '.join(BUILDERS)}", field="--family",
                          value=family)
    profile_name = name or (out_file.stem if out_file else model.name.split(".config")[0])
    if not is_safe_name(profile_name):
        raise OptionError("must be a safe file name: letters, digits, '.', '_', '-'",
                          field="--name", value=profile_name)
    if out_file:
        check_out_dir(out_file.parent)
    chosen = find_gpu(gpu)
    arch = load_architecture(model)
    check_tensor_parallel(arch, tp, file=model)
    eff = with_overrides(default_efficiency(chosen), mfu_prefill=mfu_prefill,
                         mfu_decode=mfu_decode, mbu=mbu, overhead_ms=overhead_ms,
                         memory_utilization=memory_utilization)
    estimate = Roofline(arch, chosen, tp, dtype, eff, max_batch_tokens)
    free = estimate.kv_capacity()
    if free < max_batch_tokens:
        raise OptionError(
            f"{arch.name} does not fit: {tp} × {chosen.name} ({chosen.memory_gib:g} GiB, "
            f"{estimate.eff.memory_utilization:g} used) hold {estimate.weights_gib():.1f} GiB of "
            f"weights and {estimate.activation_reserve_gib():.1f} GiB of activations per GPU, "
            f"leaving KV room for {free} tokens, fewer than one batch of {max_batch_tokens} "
            "(use more GPUs, fp8 or a smaller --max-batch-tokens)", file=model, field="--tp",
            value=tp)
    command_line = "llmopt profile roofline " + shlex.join(
        [f"--model={model.name}", f"--gpu={chosen.name}", f"--tp={tp}", f"--dtype={dtype}",
         f"--max-batch-tokens={max_batch_tokens}"]
        + ([f"--family={family}"] if family != "infermax" else [])
        + [f"--{k.replace('_', '-')}={v}" for k, v in (
            ("max_decodes", max_decodes if max_decodes != 512 else None),
            ("mfu_prefill", mfu_prefill), ("mfu_decode", mfu_decode), ("mbu", mbu),
            ("overhead_ms", overhead_ms), ("memory_utilization", memory_utilization))
           if v is not None])
    data = BUILDERS[family](estimate, name=profile_name, model_file=model.name,
                            command=command_line, max_decodes=max_decodes)
    write_or_print(profile_yaml(data, file=out_file), out_file)
