"""(Re)write the roofline profiles bundled in models/ with ``llmopt profile roofline`` (the
default efficiencies of each GPU: ``llmopt/data/hardware/efficiency.csv``): the fitted InferMax
profiles, and the roofline-family ones where the fit is poor."""

from __future__ import annotations

import argparse
import subprocess
import sys

from _common import ROOT

from llmopt.data.cost.hardware import hardware_dir

#: (profile name, model config, GPU, tensor parallelism)
PROFILES = (
    ("roofline-llama3.1-8b-a100", "llama-3.1-8b-instruct", "A100-SXM4-80GB", 1),
    ("roofline-llama3.1-8b-h100", "llama-3.1-8b-instruct", "H100-SXM5-80GB", 1),
    ("roofline-llama3.1-70b-2xh100", "llama-3.1-70b-instruct", "H100-SXM5-80GB", 2),
    ("roofline-llama3.1-70b-4xh100", "llama-3.1-70b-instruct", "H100-SXM5-80GB", 4),
    ("roofline-llama3.1-70b-4xa100", "llama-3.1-70b-instruct", "A100-SXM4-80GB", 4),
    ("roofline-qwen2.5-7b-l40s", "qwen2.5-7b-instruct", "L40S-48GB", 1),
    ("roofline-qwen2.5-7b-h100", "qwen2.5-7b-instruct", "H100-SXM5-80GB", 1),
    ("roofline-mixtral-8x7b-2xh100", "mixtral-8x7b-v0.1", "H100-SXM5-80GB", 2),
    ("roofline-qwen3-30b-a3b-h100", "qwen3-30b-a3b", "H100-SXM5-80GB", 1),
)
#: the same, written with --family roofline (the roofline times every iteration): the settings
#: where the fitted form errs by more than 20 % on average in a region (a mixture of experts)
ROOFLINE_FAMILY = (
    ("roofline-mixtral-8x7b-2xh100-direct", "mixtral-8x7b-v0.1", "H100-SXM5-80GB", 2),
    ("roofline-qwen3-30b-a3b-h100-direct", "qwen3-30b-a3b", "H100-SXM5-80GB", 1),
)


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    runs = [(*p, "infermax") for p in PROFILES] + [(*p, "roofline") for p in ROOFLINE_FAMILY]
    for name, config, gpu, tp, family in runs:
        model = hardware_dir() / "models" / f"{config}.config.json"
        done = subprocess.run(
            [sys.executable, "-m", "llmopt", "profile", "roofline", "--model", str(model),
             "--gpu", gpu, "--tp", str(tp), "--out", str(ROOT / "models" / f"{name}.yaml")]
            + (["--family", family] if family != "infermax" else []),
            capture_output=True, text=True)
        sys.stdout.write(done.stdout)
        if done.returncode:
            sys.stderr.write(done.stderr)
            return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
