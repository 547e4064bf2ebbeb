"""Progress reporting for long work (solves, replays, benchmarks).

Library code reports through a :class:`Progress`; the default :data:`SILENT` does nothing, the CLI
passes a :class:`ConsoleProgress` that shows a live status line on stderr (and, with
``--verbose``, the solver log).
"""

from __future__ import annotations

import os
import sys
import time
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from rich.status import Status


class Progress:
    """Receives progress events. Subclass and override what you need."""

    verbose: bool = False

    def stage(self, text: str) -> None:
        """A new phase of work began."""

    def incumbent(self, objective: float | None = None, bound: float | None = None,
                  unit: str = "") -> None:
        """The best solution or the best bound improved."""

    def log(self, line: str) -> None:
        """A line of solver log (shown only when verbose)."""

    def done(self) -> None:
        """Work finished; clear any live display."""


SILENT = Progress()


class ConsoleProgress(Progress):
    """Live one-line status on the terminal's stderr.

    The stream is a duplicate of file descriptor 2 taken at construction, so that the display
    keeps working while a solver captures the process's own stdout/stderr.
    """

    def __init__(self, verbose: bool = False, stream: IO[str] | None = None) -> None:
        from rich.console import Console

        self.verbose = verbose
        if stream is None:
            try:
                stream = os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1)
            except (OSError, ValueError, AttributeError):
                stream = sys.stderr
        self.console = Console(file=stream, stderr=True)
        self._status: Status | None = None
        self._stage = ""
        self._t0 = time.perf_counter()
        self._best: tuple[float | None, float | None, str] = (None, None, "")

    def _render(self) -> str:
        obj, bound, unit = self._best
        parts = [self._stage]
        if obj is not None:
            parts.append(f"incumbent {obj:,.1f}{unit}")
        if bound is not None:
            parts.append(f"bound {bound:,.1f}{unit}")
        parts.append(f"{time.perf_counter() - self._t0:.1f}s")
        return " · ".join(p for p in parts if p)

    def _refresh(self) -> None:
        if not self.console.is_terminal:
            return
        if self._status is None:
            self._status = self.console.status(self._render(), spinner="dots")
            self._status.start()
        else:
            self._status.update(self._render())

    def stage(self, text: str) -> None:
        self._stage = text
        if not self.console.is_terminal or self.verbose:
            self.console.print(f"[dim]… {text}[/dim]", highlight=False)
        self._refresh()

    def incumbent(self, objective: float | None = None, bound: float | None = None,
                  unit: str = "") -> None:
        old_obj, old_bound, _ = self._best
        self._best = (objective if objective is not None else old_obj,
                      bound if bound is not None else old_bound, unit)
        self._refresh()

    def log(self, line: str) -> None:
        if self.verbose:
            self.console.print(line.rstrip("\n"), markup=False, highlight=False)

    def done(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
