"""HiGHS back end: solves a Pyomo model through Pyomo's persistent HiGHS interface (highspy)."""

from __future__ import annotations

import io
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import highspy
import pyomo.environ as pyo
from pyomo.contrib.solver.common.results import SolutionStatus, TerminationCondition
from pyomo.contrib.solver.solvers.highs import Highs

from llmopt.backends.common import Ending, Outcome, OutOfTime, solution_or_none
from llmopt.backends.highspy_run import _stop_lp_on
from llmopt.backends.highspy_run import run_interruptible as run_interruptible  # re-exported
from llmopt.progress import SILENT, Progress
from llmopt.signals import sigint_sets


def version() -> str:
    h = highspy.Highs()
    return f"highs {h.versionMajor()}.{h.versionMinor()}.{h.versionPatch()}"


class _LogStream(io.TextIOBase):
    """File-like sink that forwards complete lines to ``Progress.log``."""

    def __init__(self, progress: Progress) -> None:
        self.progress, self.buf = progress, ""

    def write(self, s: str) -> int:
        self.buf += s
        *lines, self.buf = self.buf.split("\n")
        for line in lines:
            self.progress.log(line)
        return len(s)

    def writable(self) -> bool:
        return True

    def close(self) -> None:  # Pyomo closes its tee streams; keep accepting late output
        if self.buf:
            self.progress.log(self.buf)
            self.buf = ""

    @property
    def closed(self) -> bool:
        return False


def solve_highs(
    model: pyo.ConcreteModel,
    *,
    time_limit_s: float | None,
    collect: Callable[[Callable[[Any], float]], Any] | None = None,
    progress: Progress = SILENT,
    warm_start: Mapping[Any, float] | None = None,
    mip_rel_gap: float = 0.0,
    mip_abs_gap: float = 0.0,
    scale: float = 1.0,
    unit: str = "",
    options: Mapping[str, Any] | None = None,
    deadline: float = math.inf,
) -> Outcome:
    """Solve a Pyomo MIP with HiGHS, keeping the incumbent on time limit or Ctrl-C.

    ``warm_start`` maps Pyomo variables to values of a feasible solution, passed to HiGHS as its
    starting incumbent. ``collect(value_of)`` reads the incumbent (``value_of(var)``). With a
    ``deadline`` (perf_counter seconds), the time limit is at most what is left of it once the
    model is loaded into HiGHS, and ``OutOfTime`` is raised when nothing is left.
    """
    opt = Highs()
    opt.set_instance(model)
    h = opt._solver_model  # the highspy.Highs object Pyomo built; public API gives no handle
    if warm_start:
        _set_start(opt, h, warm_start)
    if math.isfinite(deadline):
        left = deadline - time.perf_counter()
        if left <= 0.05:
            raise OutOfTime
        time_limit_s = left if time_limit_s is None else min(time_limit_s, left)
    last = [0.0]
    stop = threading.Event()

    def report(event: Any) -> None:
        if stop.is_set():
            event.interrupt()
            return
        now = time.perf_counter()
        if now - last[0] < 0.2:
            return
        last[0] = now
        out = event.data_out
        primal = out.mip_primal_bound if abs(out.mip_primal_bound) < 1e30 else None
        dual = out.mip_dual_bound if abs(out.mip_dual_bound) < 1e30 else None
        progress.incumbent(primal * scale if primal is not None else None,
                           dual * scale if dual is not None else None, unit)

    h.cbMipInterrupt.subscribe(report)
    h.cbMipImprovingSolution.subscribe(report)
    _stop_lp_on(h, stop)
    solver_options = {"mip_rel_gap": mip_rel_gap, "mip_abs_gap": mip_abs_gap}
    solver_options.update(options or {})
    t0 = time.perf_counter()
    with sigint_sets(stop):
        res = opt.solve(
            model,
            time_limit=time_limit_s,
            load_solutions=False,
            raise_exception_on_nonoptimal_result=False,
            tee=[_LogStream(progress)] if progress.verbose else False,
            solver_options=solver_options,
        )
    runtime = time.perf_counter() - t0
    has_solution = res.solution_status in (SolutionStatus.feasible, SolutionStatus.optimal)
    tc = res.termination_condition
    ending: Ending
    if tc == TerminationCondition.convergenceCriteriaSatisfied and has_solution:
        ending = "optimal"
    elif tc == TerminationCondition.provenInfeasible:
        ending = "infeasible"
    elif has_solution:
        ending = "feasible"
    elif tc == TerminationCondition.error:
        ending = "error"
    else:
        ending = "no_solution"
    if has_solution:
        res.solution_loader.load_vars()
    interrupted = stop.is_set() or h.getModelStatus() == highspy.HighsModelStatus.kInterrupt
    bound = res.objective_bound
    if ending == "infeasible" or bound is None or not math.isfinite(bound):
        bound = None
    return Outcome(
        ending=ending,
        objective=res.incumbent_objective if has_solution else None,
        bound=bound,
        runtime_s=runtime,
        solver_version=version(),
        interrupted=interrupted,
        message=f"HiGHS termination: {tc.name if hasattr(tc, 'name') else tc}",
        solution=solution_or_none(ending, collect, pyo.value),
    )


def _set_start(opt: Highs, h: highspy.Highs, start: Mapping[Any, float]) -> None:
    col_of = opt._pyomo_var_to_solver_var_map
    n = h.getNumCol()
    sol = highspy.HighsSolution()
    values = [0.0] * n
    for var, val in start.items():
        col = col_of.get(id(var))
        if col is not None:
            values[col] = float(val)
    sol.col_value = values
    sol.value_valid = True
    h.setSolution(sol)
