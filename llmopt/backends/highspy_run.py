"""HiGHS run through highspy alone, stoppable by Ctrl-C or SIGTERM: for models built directly
(the arc-flow model of P||Cmax), which need not load Pyomo; :mod:`llmopt.backends.highs` uses
it for the Pyomo models too."""

from __future__ import annotations

import threading
from typing import Any

import highspy

from llmopt.signals import sigint_sets


def _stop_lp_on(h: highspy.Highs, stop: threading.Event) -> None:
    """Simplex and interior-point iterations (an LP, or a MIP's root) stop once ``stop`` is
    set (the MIP's own interrupt callback is the caller's)."""

    def check(event: Any) -> None:
        if stop.is_set():
            event.interrupt()

    h.cbSimplexInterrupt.subscribe(check)
    h.cbIpmInterrupt.subscribe(check)


def run_interruptible(h: highspy.Highs) -> None:
    """``h.run()`` that Ctrl-C (or SIGTERM) stops at HiGHS's next check in the simplex,
    interior-point or MIP solver, then raises KeyboardInterrupt (for a highspy model built
    directly, without Pyomo)."""
    stop = threading.Event()

    def check(event: Any) -> None:
        if stop.is_set():
            event.interrupt()

    h.cbMipInterrupt.subscribe(check)
    _stop_lp_on(h, stop)
    with sigint_sets(stop):
        h.run()
    if stop.is_set():
        raise KeyboardInterrupt


__all__ = ["run_interruptible"]
