"""Where cells run: in this process, in local worker processes, or on Dask distributed.

Every engine runs the same :func:`llmopt.sweep.cell.run_cell` and yields ``(cell, row)`` as
cells finish, in any order. A cell whose worker process dies is run once more; if its worker
dies again it is recorded as failed. Scheduling is the engines' own (``concurrent.futures``,
Dask); llmopt adds no queue of its own.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Protocol

from llmopt.data.trace_formats import TraceWarning
from llmopt.errors import OptionError, one_line_warnings, unknown_name
from llmopt.plugins import load
from llmopt.sweep import cell as cells
from llmopt.sweep.spec import Cell

WORKER_DIED = "internal error WorkerDied: the worker process running this cell died twice"


CellFunction = Callable[[Cell], dict[str, Any]]


class Engine(Protocol):
    workers: int
    function: CellFunction  # run_cell; a test may give another (picklable by reference)

    def map(self, todo: Sequence[Cell]) -> Iterator[tuple[Cell, dict[str, Any]]]:
        """Run ``todo``; yield each cell with its row as it finishes."""

    def running(self) -> int:
        """Cells started and not finished."""

    def close(self) -> None:
        """Stop every worker (cells in flight are lost)."""


@dataclass(frozen=True)
class EngineInfo:
    name: str
    summary: str
    make: str  # "module:callable" (workers: int | None, address: str | None) -> Engine


ENGINES: dict[str, EngineInfo] = {e.name: e for e in [
    EngineInfo("local", "worker processes on this machine (concurrent.futures), one per core",
               "llmopt.sweep.engines:LocalEngine"),
    EngineInfo("dask", "Dask distributed: a LocalCluster, or the cluster at --address",
               "llmopt.sweep.dask_engine:DaskEngine"),
    EngineInfo("serial", "one cell after another in this process", "llmopt.sweep.engines:"
               "SerialEngine"),
]}


def check_engine(name: str, workers: int | None = None, address: str | None = None) -> None:
    """The engine options, refused (one OptionError naming the option) before any work."""
    if workers is not None and workers < 1:
        raise OptionError("must be at least 1", field="--workers", value=workers)
    if name not in ENGINES:
        raise OptionError(unknown_name("engine", name, ENGINES), field="--engine",
                          value=name)
    if address is not None and name != "dask":
        raise OptionError("a cluster address needs --engine dask", field="--address",
                          value=address)


def open_engine(name: str, workers: int | None = None, address: str | None = None) -> Engine:
    check_engine(name, workers, address)
    engine: Engine = load(ENGINES[name].make)(workers=workers, address=address)
    return engine


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


class SerialEngine:
    """Cells one after another in this process (no start-up cost; a debugger sees them)."""

    def __init__(self, workers: int | None = None, address: str | None = None) -> None:
        self.workers = 1
        self.function: CellFunction = cells.run_cell
        self._running = 0

    def map(self, todo: Sequence[Cell]) -> Iterator[tuple[Cell, dict[str, Any]]]:
        for cell in todo:
            self._running = 1
            row = self.function(cell)
            self._running = 0
            yield cell, row

    def running(self) -> int:
        return self._running

    def close(self) -> None:
        pass


def _worker_start() -> None:
    """Workers leave Ctrl-C to the parent, which stops them, stay quiet about traces read out
    of order (the parent has read every instance of the sweep and said so once), and print
    llmopt's other warnings as one line each, once per worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    warnings.simplefilter("ignore", TraceWarning)
    warnings.showwarning = one_line_warnings(lambda line: print(line, file=sys.stderr),
                                             warnings.showwarning)


class LocalEngine:
    """A ``ProcessPoolExecutor`` of ``workers`` processes (default: one per core), started
    by a fork server that has imported llmopt once.

    When a worker dies, the pool breaks and every cell in flight is lost with it: those cells
    are run again, each alone in a fresh one-process pool, so that a cell that kills its worker
    twice is the one recorded as failed and no other cell pays for it.
    """

    def __init__(self, workers: int | None = None, address: str | None = None) -> None:
        self.workers = workers or default_workers()
        self.function: CellFunction = cells.run_cell
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(["llmopt.sweep.cell"])
        self._pool: ProcessPoolExecutor | None = None
        self._in_flight: dict[Future[dict[str, Any]], Cell] = {}

    def _new_pool(self, workers: int) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(workers, mp_context=self._context,
                                   initializer=_worker_start)

    def map(self, todo: Sequence[Cell]) -> Iterator[tuple[Cell, dict[str, Any]]]:
        queue = deque(todo)
        suspects: list[Cell] = []
        while queue:
            if self._pool is None:
                self._pool = self._new_pool(self.workers)
            pool = self._pool
            # keep the pool a little ahead of its workers, not the whole sweep submitted
            while queue and len(self._in_flight) < 2 * self.workers:
                cell = queue.popleft()
                self._in_flight[pool.submit(self.function, cell)] = cell
            done, _ = wait(self._in_flight, return_when=FIRST_COMPLETED)
            for future in done:
                cell = self._in_flight.pop(future)
                try:
                    row = future.result()
                except BrokenProcessPool:
                    suspects.append(cell)
                    continue
                yield cell, row
            if suspects or self._broken():
                suspects += list(self._in_flight.values())
                self._in_flight.clear()
                self._shutdown()
                for cell in suspects:
                    yield cell, self._alone(cell)
                suspects = []
        while self._in_flight:
            yield from self._drain()

    def _drain(self) -> Iterator[tuple[Cell, dict[str, Any]]]:
        done, _ = wait(self._in_flight, return_when=FIRST_COMPLETED)
        for future in done:
            cell = self._in_flight.pop(future)
            try:
                yield cell, future.result()
            except BrokenProcessPool:
                yield cell, self._alone(cell)

    def _broken(self) -> bool:
        return bool(self._pool is not None and getattr(self._pool, "_broken", False))

    def _alone(self, cell: Cell) -> dict[str, Any]:
        """Run ``cell`` again in a pool of its own; a second death of its worker fails it."""
        with self._new_pool(1) as pool:
            try:
                return pool.submit(self.function, cell).result()
            except BrokenProcessPool:
                return {"key": cell.key, "cell_status": "failed", "error": WORKER_DIED}

    def running(self) -> int:
        return sum(1 for f in self._in_flight if f.running())

    def _shutdown(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.terminate()

    def close(self) -> None:
        if self._in_flight:
            self._in_flight.clear()
            self._shutdown()
        elif self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
