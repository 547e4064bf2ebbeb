"""The roofline estimate (``llmopt profile roofline``) against measurement.

1. Calibration: the efficiencies (MFU, MBU of weight streaming and of element-wise kernels, the
   floor of a kernel) are fitted, per GPU, to Vidur's measured non-attention operator times of
   one Llama-2-7B layer (``../shared/data/profiling/vidur_{a100,h100}_llama2-7b_mlp.csv``) at
   tensor parallelism 1 and 8 (least squares of the log ratio); tp 2 and 4 are held out.
   ``--write-calibration`` writes them into ``llmopt/data/hardware/efficiency.csv``.
2. Check against Vidur's tables: the roofline's layer time against every row (calibration rows
   and held-out rows apart), by batch size.
3. Check against the InferMax profiles llmopt ships for measured settings (Llama-2-7B/A100,
   Llama-3-8B/A100, Llama-3-70B/4×A100): iteration times over the same batch shapes.

Needs ``../shared/data``; prints, and with ``--write-docs`` writes docs/benchmarks.md.
"""

from __future__ import annotations

import csv
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from _common import ROOT, docs_parser, header, publish
from scipy.optimize import least_squares

from llmopt.data.cost import InferMaxProfile, load_profile
from llmopt.data.cost.hardware import find_gpu, hardware_dir, load_architecture
from llmopt.data.cost.roofline import Efficiency, Roofline, default_efficiency
from llmopt.data.cost.roofline_fit import REGIONS, fit_infermax, operating_region

PROFILING = ROOT.parent / "shared" / "data" / "profiling"
MODELS = hardware_dir() / "models"
MEASURED = {"A100-SXM4-80GB": "vidur_a100_llama2-7b_mlp.csv",
            "H100-SXM5-80GB": "vidur_h100_llama2-7b_mlp.csv"}
CALIBRATION_TP = (1, 8)
STARTS = ((0.7, 0.7, 0.5, 0.005), (0.5, 0.9, 0.9, 0.01), (0.9, 0.5, 0.3, 0.002))
BUCKETS = ((1, 128, "1–128"), (129, 1024, "129–1024"), (1025, 1 << 30, "1025–4096"))
# the InferMax profiles llmopt ships for measured settings, and the roofline of each
INFERMAX = (("infermax-llama2-7b-a100", "llama-2-7b-hf", "A100-SXM4-80GB", 1),
            ("infermax-llama3-8b-a100", "llama-3.1-8b-instruct", "A100-SXM4-80GB", 1),
            ("infermax-llama3-70b-4xa100", "llama-3.1-70b-instruct", "A100-SXM4-80GB", 4))


def measured_layers(gpu: str) -> pd.DataFrame:
    """num_tokens, tp and the measured non-attention time of one layer (ms): the ``*.median``
    operator columns summed, the embedding left out (it runs once per model, not per layer)."""
    frame = pd.read_csv(PROFILING / MEASURED[gpu])
    medians = [c for c in frame.columns if c.endswith(".median") and ".emb." not in c]
    return pd.DataFrame({"tokens": frame["num_tokens"].astype(int),
                         "tp": frame["num_tensor_parallel_workers"].astype(int),
                         "ms": frame[medians].sum(axis=1)})


def layer_times(eff: Efficiency, gpu: str, rows: pd.DataFrame) -> np.ndarray:
    arch = load_architecture(MODELS / "llama-2-7b-hf.config.json")
    by_tp = {tp: Roofline(arch, find_gpu(gpu), tp, "bf16", eff) for tp in rows["tp"].unique()}
    return np.array([by_tp[tp].layer_ms(n) for tp, n in zip(rows["tp"], rows["tokens"],
                                                            strict=True)])


def calibrate(gpu: str, rows: pd.DataFrame) -> tuple[Efficiency, float]:
    """The efficiencies minimising the squared log ratio over ``rows`` (best of a few starts)."""
    def efficiency(x: np.ndarray) -> Efficiency:
        return Efficiency(mfu_prefill=x[0], mfu_decode=x[0], mbu=x[1], mbu_elementwise=x[2],
                          kernel_floor_ms=x[3])

    measured = rows["ms"].to_numpy()
    best = None
    for start in STARTS:
        fit = least_squares(lambda x: np.log(layer_times(efficiency(x), gpu, rows) / measured),
                            start, bounds=([0.05, 0.05, 0.05, 0.0], [1.0, 1.0, 1.0, 0.1]))
        if best is None or fit.cost < best.cost:
            best = fit
    assert best is not None
    return efficiency(best.x), float(best.cost)


def errors(predicted: np.ndarray, measured: np.ndarray) -> str:
    rel = np.abs(predicted / measured - 1)
    return f"{rel.max():.1%} | {rel.mean():.1%} | {np.median(predicted / measured):.2f}"


def write_calibration(calibrated: dict[str, Efficiency]) -> Path:
    """``efficiency.csv``: the calibrated GPUs, the GPUs of the same chip, and a default row
    (the mean of the calibrations) for the GPUs no measurement covers."""
    a100, h100 = calibrated["A100-SXM4-80GB"], calibrated["H100-SXM5-80GB"]
    source = ("fitted by bench/roofline_check.py to Vidur's measured Llama-2-7B non-attention "
              "operator times on {} (tp 1 and 8)")
    rows = [("A100-SXM4-80GB", a100, source.format("A100")),
            ("A100-SXM4-40GB", a100, source.format("A100-80GB") + "; same chip"),
            ("H100-SXM5-80GB", h100, source.format("H100")),
            ("H200-SXM-141GB", h100, source.format("H100") + "; same chip, faster HBM")]
    mean = Efficiency(*(float(np.mean([getattr(a100, f), getattr(h100, f)]))
                        for f in ("mfu_prefill", "mfu_decode", "mbu", "mbu_elementwise",
                                  "kernel_floor_ms")))
    rows.append(("default", mean, "not calibrated on this GPU (no measurement): the mean of "
                 "the A100 and H100 calibrations of bench/roofline_check.py"))
    path = hardware_dir() / "efficiency.csv"
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["gpu", "mfu", "mbu", "mbu_elementwise", "kernel_floor_ms",
                         "calibration"])
        for gpu, eff, text in rows:
            writer.writerow([gpu, f"{eff.mfu_prefill:.3f}", f"{eff.mbu:.3f}",
                             f"{eff.mbu_elementwise:.3f}", f"{eff.kernel_floor_ms:.4f}", text])
    return path


def vidur_section(calibrated: dict[str, Efficiency]) -> list[str]:
    lines = ["Roofline layer time against Vidur's measured non-attention operators of one "
             "Llama-2-7B layer (261 batch sizes, 1 to 4096 tokens, per tp). Calibration rows: "
             f"tp {' and '.join(map(str, CALIBRATION_TP))}; tp 2 and 4 are held out. Columns: "
             "max and mean relative error, median ratio roofline / measured.", "",
             "| GPU | tp | rows | tokens | max err | mean err | median ratio |",
             "|---|---|---|---|---|---|---|"]
    for gpu, eff in calibrated.items():
        rows = measured_layers(gpu)
        for tp in sorted(rows["tp"].unique()):
            at = rows[rows["tp"] == tp]
            role = "calibration" if tp in CALIBRATION_TP else "held out"
            lines.append(f"| {gpu} | {tp} ({role}) | {len(at)} | all | "
                         f"{errors(layer_times(eff, gpu, at), at['ms'].to_numpy())} |")
            for low, high, label in BUCKETS:
                part = at[(at["tokens"] >= low) & (at["tokens"] <= high)]
                lines.append(f"| | | {len(part)} | {label} | "
                             f"{errors(layer_times(eff, gpu, part), part['ms'].to_numpy())} |")
    return lines


def infermax_line_section() -> list[str]:
    """The measured table against the line the InferMax Llama-2-7B profile fitted through it:
    where the linear form itself is off."""
    profile = load_profile("infermax-llama2-7b-a100")
    lines = ["For scale, the non-attention line of `infermax-llama2-7b-a100` (bias + per_token "
             "· N, fitted to the same A100 table, tp 1, with the embedding counted per layer) "
             "against that table (× 32 layers, embedding included as the profile counts it):",
             "", "| tokens | rows | max err | mean err | median ratio line / measured |",
             "|---|---|---|---|---|"]
    frame = pd.read_csv(PROFILING / MEASURED["A100-SXM4-80GB"])
    frame = frame[frame["num_tensor_parallel_workers"] == 1]
    medians = [c for c in frame.columns if c.endswith(".median")]
    total = frame[medians].sum(axis=1).to_numpy() * 32
    tokens = frame["num_tokens"].to_numpy()
    line = profile.bias_ms + profile.per_token_ms * tokens  # type: ignore[attr-defined]
    for low, high, label in BUCKETS:
        inside = (tokens >= low) & (tokens <= high)
        lines.append(f"| {label} | {inside.sum()} | {errors(line[inside], total[inside])} |")
    return lines


def infermax_section() -> list[str]:
    lines = ["Roofline iteration times (default efficiencies of the GPU) against the InferMax "
             "profiles llmopt ships for these settings, over the profile's own operating region "
             "(its C and M; the shapes of `llmopt profile roofline`). These profiles are not "
             "measurements themselves: their non-attention terms are the Vidur A100 Llama-2-7B "
             "fit (scaled by weights for 8B and 70B), their attention terms a roofline, so "
             "this checks consistency with the measured line, not accuracy on new hardware.",
             "", "| profile | against | region | shapes | max err | mean err | median ratio ours / "
             "profile |",
             "|---|---|---|---|---|---|---|"]
    for name, config, gpu, tp in INFERMAX:
        profile = load_profile(name)
        chosen = find_gpu(gpu)
        C = getattr(profile, "max_batch_tokens", None) or 8192
        M = getattr(profile, "kv_capacity", None) or 100000
        roof = Roofline(load_architecture(MODELS / f"{config}.config.json"), chosen, tp, "bf16",
                        default_efficiency(chosen), C)
        shapes = list(operating_region(C, M))
        coefficients, _ = fit_infermax(roof, shapes)
        fitted = InferMaxProfile(name="fitted", family="infermax", source="roofline fit",
                                 **coefficients)
        for region in REGIONS:
            args = [(s.prefill_tokens, s.decodes, s.decode_kv, s.units, s.chunks)
                    for s in shapes if s.region == region]
            theirs = np.array([profile.iteration_ms(*a) for a in args])  # type: ignore[attr-defined]
            for what, model in (("roofline", roof), ("its InferMax fit", fitted)):
                ours = np.array([model.iteration_ms(*a) for a in args])
                lines.append(f"| `{name}` | {what} of {config}, {tp} × {gpu} | {region} | "
                             f"{len(args)} | {errors(ours, theirs)} |")
    return lines


def main() -> int:
    ap = docs_parser(__doc__.splitlines()[0])
    ap.add_argument("--write-calibration", action="store_true",
                    help="write the calibrated efficiencies into llmopt/data/hardware/"
                    "efficiency.csv")
    args = ap.parse_args()
    if not PROFILING.is_dir():
        print(f"no measured tables: {PROFILING} is absent", file=sys.stderr)
        return 1
    calibrated = {}
    lines = [header("python bench/roofline_check.py --write-docs"),
             "Calibrated efficiencies (fitted on the calibration rows below; the defaults of "
             "`llmopt profile roofline`, in `llmopt/data/hardware/efficiency.csv`):", "",
             "| GPU | MFU | MBU (weights, KV) | MBU (element-wise) | kernel floor (ms) | "
             "sum of squared log ratios |", "|---|---|---|---|---|---|"]
    for gpu in MEASURED:
        rows = measured_layers(gpu)
        eff, cost = calibrate(gpu, rows[rows["tp"].isin(CALIBRATION_TP)])
        calibrated[gpu] = replace(eff, calibration=f"calibrated on {gpu}")
        lines.append(f"| {gpu} | {eff.mfu_prefill:.3f} | {eff.mbu:.3f} | "
                     f"{eff.mbu_elementwise:.3f} | {eff.kernel_floor_ms:.4f} | {2 * cost:.2f} |")
    if args.write_calibration:
        print(f"wrote {write_calibration(calibrated)}", file=sys.stderr)
    lines += ["", *vidur_section(calibrated), "", *infermax_section(), "",
              *infermax_line_section()]
    publish(args.write_docs, "roofline-check", "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
