"""A wheel built from the repository carries the cost profiles and example instances as package
data: installed on its own, it solves a copied toy instance from an empty directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT


def tracked_copy(dest: Path) -> Path:
    """The repository's tracked files (links kept) in ``dest``, so that building leaves no
    build/ or egg-info behind in the working tree."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: cannot list the files a build would take")
    for name in filter(None, listed.stdout.decode().split("\0")):
        src, dst = ROOT / name, dest / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        elif src.is_file():
            shutil.copy2(src, dst)
    return dest


def test_wheel_solves_a_copied_toy_instance_from_an_empty_directory(tmp_path):
    pytest.importorskip("build")
    source = tracked_copy(tmp_path / "src")
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation",
                            "--outdir", str(tmp_path / "dist"), str(source)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("llmopt-*.whl"))
    site = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                                "--target", str(site), str(wheel)], capture_output=True,
                               text=True)
    assert installed.returncode == 0, installed.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copy(ROOT / "instances" / "toy" / "quickstart.yaml", empty / "quickstart.yaml")
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("LLMOPT_MODELS", None)

    def llmopt(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "llmopt", *args], cwd=empty, env=env,
                              capture_output=True, text=True)

    where = subprocess.run([sys.executable, "-c", "import llmopt; print(llmopt.__file__)"],
                           cwd=empty, env=env, capture_output=True, text=True)
    assert where.stdout.startswith(str(site)), where.stdout  # the wheel, not the checkout
    solved = llmopt("solve", "quickstart.yaml", "--out", "out", "--no-plot")
    assert solved.returncode == 0, solved.stderr
    path = empty / "out" / "quickstart" / "binpacking-auto.json"
    assert json.loads(path.read_text())["status"] == "optimal"
    checked = llmopt("validate", "quickstart.yaml", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    listed = llmopt("list", "examples")
    assert "quickstart.yaml" in listed.stdout and str(site) in listed.stdout.replace("\n", "")
    # the GPU table, the efficiencies and the model configs ship too
    config = site / "llmopt" / "data" / "hardware" / "models" / "qwen2.5-7b-instruct.config.json"
    made = llmopt("profile", "roofline", "--model", str(config), "--gpu", "L40S-48GB", "--out",
                  "qwen.yaml")
    assert made.returncode == 0, made.stderr
    assert "family: infermax" in (empty / "qwen.yaml").read_text()
