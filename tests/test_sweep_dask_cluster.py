"""A real Dask cluster: ``dask scheduler`` and two ``dask worker`` processes on 127.0.0.1, a
12-cell sweep sent to it with ``--address``, and the table compared with the serial run."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pandas as pd
import pytest
from distributed import Client

from conftest import GENERATED_SWEEP
from llmopt.sweep.runner import run_sweep
from llmopt.sweep.spec import load_sweep

SWEEP = GENERATED_SWEEP + "grid: {policy: [baseline, hybrid], seed: {from: 0, to: 5}}\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def cluster() -> Iterator[str]:
    address = f"tcp://127.0.0.1:{free_port()}"
    dask = [sys.executable, "-m", "dask"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port",
                               address.rsplit(":", 1)[1], "--no-dashboard"], **quiet)]
    try:
        procs += [subprocess.Popen([*dask, "worker", address, "--nworkers", "1", "--nthreads",
                                    "1", "--no-dashboard"], **quiet) for _ in range(2)]
        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        yield address
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_a_sweep_on_a_running_cluster_equals_the_serial_run(tmp_path, cluster, cli):
    path = tmp_path / "sweep.yaml"
    path.write_text(textwrap.dedent(SWEEP))
    result = cli("sweep", path, "--out", tmp_path / "cluster", "--address", cluster,
                 "--no-plot")
    assert result.exit_code == 0, result.output
    assert "12 cells, 12 ok, 0 failed; 12 run now" in result.output
    on_cluster = pd.read_parquet(tmp_path / "cluster" / "results.parquet")
    serial = run_sweep(load_sweep(path), tmp_path / "serial", engine="serial").table
    assert len(serial) == 12
    pd.testing.assert_frame_equal(on_cluster.drop(columns="runtime_s"),
                                  serial.drop(columns="runtime_s"))
