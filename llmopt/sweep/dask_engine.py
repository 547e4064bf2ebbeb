"""The Dask distributed engine: a LocalCluster of worker processes, or an existing cluster.

An existing cluster is one the user started (``dask scheduler`` and ``dask worker
tcp://HOST:PORT`` on each machine, with llmopt installed and the instance files at the same
paths). Dask schedules the cells; a cell whose worker dies is rescheduled by Dask's scheduler
(``distributed.scheduler.allowed-failures`` times; 0 on our LocalCluster) and then once more by
this engine before it is recorded as failed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import dask
from distributed import Client, Future, LocalCluster, as_completed
from distributed.scheduler import KilledWorker

from llmopt.errors import OptionError
from llmopt.sweep import cell as cells
from llmopt.sweep.engines import WORKER_DIED, CellFunction, default_workers
from llmopt.sweep.spec import Cell

CONNECT_TIMEOUT_S = 5
LOCAL_CLUSTER_CONFIG = {
    "distributed.scheduler.allowed-failures": 0,  # this engine retries a dead worker's cell once
    "distributed.worker.daemon": False,
    # the statistical profiler samples every task's stack every 10 ms; no use for cells
    "distributed.worker.profile.enabled": False,
    # Dask sets MALLOC_TRIM_THRESHOLD_=65536 in its workers to return memory to the system
    # early; a cell allocates and frees many small objects, and one cell took 1.30 s of CPU
    # under it against 1.12 s without (a one-off comparison; bench/sweep_speed.py times the
    # engine as configured here)
    "distributed.nanny.pre-spawn-environ": {"OMP_NUM_THREADS": 1, "MKL_NUM_THREADS": 1,
                                             "OPENBLAS_NUM_THREADS": 1},
}


class DaskEngine:
    def __init__(self, workers: int | None = None, address: str | None = None) -> None:
        self._cluster: LocalCluster | None = None
        self.function: CellFunction = cells.run_cell
        if address is None:
            with dask.config.set(LOCAL_CLUSTER_CONFIG):
                self._cluster = LocalCluster(n_workers=workers or default_workers(),
                                             threads_per_worker=1, processes=True,
                                             dashboard_address=None)
                self.client = Client(self._cluster)
        else:
            if workers is not None:
                raise OptionError("the cluster at --address has its own workers",
                                  field="--workers", value=workers)
            try:
                self.client = Client(address, timeout=CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError, ValueError) as exc:
                reason = " ".join(str(exc).split())[:200]
                raise OptionError(f"cannot reach a Dask scheduler there ({reason})",
                                  field="--address", value=address) from None
        self.workers = max(1, sum(w.get("nthreads", 1) for w in
                                  self.client.scheduler_info()["workers"].values()))
        self._in_flight: dict[Future, tuple[Cell, int]] = {}

    def map(self, todo: Sequence[Cell]) -> Iterator[tuple[Cell, dict[str, Any]]]:
        pending = as_completed()
        for cell in todo:
            pending.add(self._submit(cell, 1))
        for future in pending:
            cell, attempt = self._in_flight.pop(future)
            try:
                row = future.result()
            except KilledWorker:
                if attempt < 2:
                    pending.add(self._submit(cell, attempt + 1))
                    continue
                row = {"key": cell.key, "cell_status": "failed", "error": WORKER_DIED}
            yield cell, row

    def _submit(self, cell: Cell, attempt: int) -> Future:
        future = self.client.submit(self.function, cell, pure=False, retries=0,
                                    key=f"cell-{cell.key[:12]}-{attempt}-{uuid.uuid4().hex[:8]}")
        self._in_flight[future] = (cell, attempt)
        return future

    def running(self) -> int:
        return min(len(self._in_flight), self.workers)

    def close(self) -> None:
        for future in list(self._in_flight):
            future.cancel()
        self._in_flight.clear()
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()
