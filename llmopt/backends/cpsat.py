"""OR-Tools CP-SAT back end."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ortools.sat.python import cp_model

from llmopt.backends.common import Ending, Outcome, solution_or_none
from llmopt.progress import SILENT, Progress
from llmopt.signals import python_sigint_restored, sigint_stops

_ENDINGS: dict[cp_model.CpSolverStatus, Ending] = {
    cp_model.OPTIMAL: "optimal",
    cp_model.FEASIBLE: "feasible",
    cp_model.INFEASIBLE: "infeasible",
    cp_model.UNKNOWN: "no_solution",
    cp_model.MODEL_INVALID: "error",
}


def version() -> str:
    import ortools

    return f"ortools-cpsat {ortools.__version__}"


class _Reporter(cp_model.CpSolverSolutionCallback):
    def __init__(self, progress: Progress, scale: float, unit: str) -> None:
        super().__init__()
        self.progress, self.scale, self.unit = progress, scale, unit

    def on_solution_callback(self) -> None:
        self.progress.incumbent(self.objective_value * self.scale,
                                self.best_objective_bound * self.scale, self.unit)


def subsolver(max_time_s: float, workers: int) -> cp_model.CpSolver:
    """A CP-SAT solver for short sub-solves inside a Python loop (a search's window, a decision
    at one makespan). It leaves SIGINT to Python: Ctrl-C raises KeyboardInterrupt once the
    sub-solve returns (at once under the CLI's watcher, with ``solve_stoppable``), and the
    loop's caller keeps its incumbent."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max_time_s
    solver.parameters.num_workers = workers
    solver.parameters.catch_sigint_signal = False
    return solver


def solve_stoppable(solver: cp_model.CpSolver, model: cp_model.CpModel) -> Any:
    """``solver.solve(model)`` for a sub-solve (``subsolver``): where the CLI's watcher runs,
    Ctrl-C (or SIGTERM) stops the search at once instead of at its time limit; either way the
    stop raises KeyboardInterrupt once the sub-solve returns."""
    stopped = threading.Event()
    with sigint_stops(solver.stop_search, stopped):
        status = solver.solve(model)
    if stopped.is_set():
        raise KeyboardInterrupt
    return status


EARLY_END_S = 0.25  # how early CP-SAT may end a time-limited run on its own (seconds)


def solve_cpsat(
    model: cp_model.CpModel,
    *,
    time_limit_s: float | None,
    collect: Callable[[Callable[[Any], int]], Any] | None = None,
    progress: Progress = SILENT,
    scale: float = 1.0,
    unit: str = "",
    workers: int | None = None,
    seed: int = 0,
) -> Outcome:
    """Solve ``model``; on a solution, ``collect(solver.value)`` builds ``Outcome.solution``.

    ``scale``/``unit`` only affect the progress display. Ctrl-C stops the search gracefully
    (CP-SAT catches SIGINT) and the incumbent is kept.
    """
    solver = cp_model.CpSolver()
    params = solver.parameters
    if time_limit_s is not None:
        params.max_time_in_seconds = max(float(time_limit_s), 0.01)
    params.num_workers = workers if workers is not None else max(os.cpu_count() or 1, 1)
    params.random_seed = seed
    if progress.verbose:
        params.log_search_progress = True
        params.log_to_stdout = False
        solver.log_callback = progress.log
    t0 = time.perf_counter()
    stopped = threading.Event()
    with sigint_stops(solver.stop_search, stopped) as ours, python_sigint_restored():
        params.catch_sigint_signal = not ours  # see llmopt.signals: CP-SAT's own is unsafe
        status = solver.solve(model, _Reporter(progress, scale, unit))
    runtime = time.perf_counter() - t0
    ending: Ending = _ENDINGS.get(status, "error")
    objective = solver.objective_value if ending in ("optimal", "feasible") else None
    bound = solver.best_objective_bound if ending != "error" else None
    if ending == "infeasible":
        bound = None
    if ours:  # the watcher saw the signal
        interrupted = stopped.is_set()
    else:  # CP-SAT caught it: it stops short of proof only then or at the time limit (though
        # under load it may end its presolve, out of time, a little before the limit: a run
        # ending within EARLY_END_S or 2 % of its limit is read as timed out)
        stopped_early = time_limit_s is None or (
            runtime < time_limit_s - max(EARLY_END_S, 0.02 * time_limit_s))
        interrupted = ending in ("feasible", "no_solution") and stopped_early
    return Outcome(
        ending=ending,
        objective=objective,
        bound=bound,
        runtime_s=runtime,
        solver_version=version(),
        interrupted=interrupted,
        message=f"CP-SAT status {solver.status_name(status)}",
        solution=solution_or_none(ending, collect, solver.value),
    )

