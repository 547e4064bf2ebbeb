"""The one place where an exact solver's answer becomes a status, a bound and a proof.

Every exact solver (bin packing, PD competition, SLO priority, the InferMax CSP, the attainment
bound, SCLS batching) hands this module what it found, re-evaluated exactly — the incumbent's
objective, the best valid bound, whether it was interrupted, what proves the bound — and gets
back the status of the result vocabulary (``llmopt.result``):

- ``optimal`` only with a proof, when the incumbent meets the bound within the tolerance the
  solver names, and the run was not interrupted (an interrupted run reports ``feasible``);
- ``feasible`` otherwise, with the bound clamped to the incumbent (a bound within tolerance of
  the incumbent on the wrong side is rounding: it is reported as the incumbent);
- an incumbent *better* than a valid bound beyond tolerance is a bug: :class:`InternalError`.

The incumbent guard lives here too: :func:`keep_better` keeps the better of a solver's plan and
the heuristic incumbent (a solver's plan is kept only when it is at least as good), and
:func:`tighter_bound` never lets a bound fall below (above, maximizing) a known valid one.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar, overload

from llmopt.backends.common import Ending
from llmopt.errors import InternalError

T = TypeVar("T")


class Sense(StrEnum):
    """Whether the objective is minimized (a bound from below) or maximized (from above)."""

    MIN = "min"
    MAX = "max"


def beyond(value: float, limit: float, sense: Sense, tol: float = 0.0) -> bool:
    """Whether ``value`` is better than ``limit`` by more than ``tol`` (lower when minimizing,
    higher when maximizing)."""
    return value < limit - tol if sense is Sense.MIN else value > limit + tol


def keep_better(incumbent: tuple[float, T], candidate: tuple[float, T] | None,
                sense: Sense = Sense.MIN, tol: float = 0.0, *,
                ties_to_incumbent: bool = False) -> tuple[float, T]:
    """The incumbent guard: ``candidate`` (a solver's plan, its objective re-evaluated exactly)
    replaces ``incumbent`` unless it is worse by more than ``tol`` (with ``ties_to_incumbent``:
    only when it is better by more than ``tol``); each is (objective, plan)."""
    if candidate is None:
        return incumbent
    if ties_to_incumbent:
        return candidate if beyond(candidate[0], incumbent[0], sense, tol) else incumbent
    return incumbent if beyond(incumbent[0], candidate[0], sense, tol) else candidate


@overload
def tighter_bound(known: float, new: float | None, sense: Sense = ...) -> float: ...
@overload
def tighter_bound(known: float | None, new: float | None, sense: Sense = ...) -> float | None: ...
def tighter_bound(known: float | None, new: float | None,
                  sense: Sense = Sense.MIN) -> float | None:
    """The better of two valid bounds (the higher lower bound, the lower upper bound); either
    may be None (unknown)."""
    if known is None or new is None:
        return new if known is None else known
    return max(known, new) if sense is Sense.MIN else min(known, new)


@dataclass(frozen=True)
class Verdict:
    """A result's status, its bound (clamped to the incumbent) and its proof (None unless
    ``optimal``)."""

    status: str
    bound: float | None
    proof: str | None

    @property
    def optimal(self) -> bool:
        return self.status == "optimal"


def decide(objective: float | None, bound: float | None, *, proof: str | None,
           sense: Sense = Sense.MIN, tol: float = 0.0, ending: Ending | None = None,
           what: str = "objective") -> Verdict:
    """The status of an incumbent of ``objective`` (re-evaluated exactly; None: no incumbent)
    against ``bound`` (a valid bound; None: none), proven by ``proof`` (what makes ``bound``
    valid and tight; None: nothing proves it tight). ``tol`` is absolute, in the objective's
    units; ``ending`` is the back end's verdict when it decides alone (``infeasible``,
    ``error``); ``what`` names the objective in the error message."""
    if ending == "error":
        return Verdict("error", None, None)
    if ending == "infeasible":
        return Verdict("infeasible", None, None)
    if objective is None:
        return Verdict("time_limit_no_solution", bound, None)
    if bound is None:
        return Verdict("feasible", None, None)
    if beyond(objective, bound, sense, tol):
        side = "below the lower" if sense is Sense.MIN else "above the upper"
        raise InternalError(f"{what} {objective!r} is {side} bound {bound!r} (tolerance "
                            f"{tol!r}): the bound or the incumbent is wrong")
    bound = min(bound, objective) if sense is Sense.MIN else max(bound, objective)
    # a proof holds whether or not the run was cut short afterwards: the bound it rests on
    # and the re-evaluated incumbent are both valid
    proven = proof is not None and abs(objective - bound) <= tol
    return Verdict("optimal" if proven else "feasible", bound, proof if proven else None)


def proof_text(method: str, claim: str, *, bound: str | None = None) -> str:
    """A proof line: ``method`` (who or what proved it) followed by ``claim`` (what it proved,
    in the problem's terms), and the bound it rests on when that is named apart: "<method>
    <claim>; lower bound <bound>". Each problem supplies its method and claim."""
    text = f"{method} {claim}"
    return text if bound is None else f"{text}; lower bound {bound}"


def meets_bound(incumbent: str, bound: str) -> str:
    """The proof of an incumbent that equals a closed-form or proven bound."""
    return f"incumbent {incumbent} equals the lower bound {bound}"


__all__ = ["Sense", "Verdict", "beyond", "decide", "keep_better", "meets_bound", "proof_text",
           "tighter_bound"]
