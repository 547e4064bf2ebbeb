"""Interrupts: Ctrl-C (SIGINT, from a terminal) and SIGTERM (what ``timeout``, batch schedulers,
CI runners and containers send) stop the work gracefully, keeping the incumbent. Python's own
SIGINT handler is put back after a solver that installs its own; while HiGHS runs, a stop signal
sets a flag its callback polls; and while CP-SAT runs in the CLI, it stops the search from a
watcher thread.

``sigterm_as_interrupt`` (called first by the CLI) makes SIGTERM raise KeyboardInterrupt as
Ctrl-C does, and leaves SIGINT as it found it. A process started with SIGINT ignored (a
background job of a non-interactive shell: ``nohup cmd &``, a batch system, a CI runner) keeps
ignoring it, as it should, and SIGTERM is then how it is stopped: gracefully too. A SIGINT or
SIGTERM handled by someone else (an application embedding llmopt) is left alone.

CP-SAT, asked to catch SIGINT, replaces the process's C-level SIGINT handler and does not put
Python's back: Python still believes its handler is installed, and the next Ctrl-C outside a
solver call would kill the process. ``python_sigint_restored`` re-installs it. Worse, its
handler is not async-signal-safe: a Ctrl-C that lands while a search thread holds an internal
lock aborts the whole process ("detected illegal recursion into Mutex code", exit by SIGABRT,
nothing written; seen once in 21 interrupts at 0–2.5 s into a solve of hard-100x20). So where
this process owns the signal wake-up fd (``sigterm_as_interrupt``, the CLI), CP-SAT does not
catch SIGINT: Python's C-level handler only writes the signal's number to the wake-up pipe, and
the watcher thread calls the running solver's ``stop_search`` (``sigint_stops``), which is
thread-safe.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator

_watching = False
_stop_hooks: list[Callable[[], None]] = []  # what a stop signal calls from the watcher


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def python_sigint_restored() -> Iterator[None]:
    """Run the body (a native solver call that installs its own SIGINT handler), then put
    Python's SIGINT handler back at the C level."""
    handler = signal.getsignal(signal.SIGINT) if _in_main_thread() else None
    try:
        yield
    finally:
        if handler is not None:
            signal.signal(signal.SIGINT, handler)


def _stop_signals() -> list[signal.Signals]:
    """The signals that stop the work now: SIGINT unless it is ignored, and SIGTERM when it
    raises KeyboardInterrupt (``sigterm_as_interrupt``)."""
    found = [] if signal.getsignal(signal.SIGINT) == signal.SIG_IGN else [signal.SIGINT]
    if signal.getsignal(signal.SIGTERM) is signal.default_int_handler:
        found.append(signal.SIGTERM)
    return found


@contextlib.contextmanager
def sigint_sets(flag: threading.Event) -> Iterator[None]:
    """While the body runs (a solver whose Python callback polls ``flag``), Ctrl-C (and SIGTERM,
    see ``sigterm_as_interrupt``) sets ``flag`` instead of raising KeyboardInterrupt inside the
    solver's callback. An ignored SIGINT stays ignored."""
    if not _in_main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda *_: flag.set()) for sig in _stop_signals()}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def sigint_stops(stop: Callable[[], None], flag: threading.Event) -> Iterator[bool]:
    """While the body runs (a native solver searching on its own threads), Ctrl-C (or SIGTERM)
    calls ``stop`` from the watcher thread and sets ``flag`` instead of raising
    KeyboardInterrupt.
    Yields whether that is so: only where this process's watcher owns the wake-up fd
    (``sigterm_as_interrupt``); otherwise the caller lets the solver catch SIGINT itself."""
    if not (_watching and _in_main_thread()):
        yield False
        return
    with sigint_sets(flag):
        _stop_hooks.append(stop)
        try:
            yield True
        finally:
            _stop_hooks.remove(stop)


def sigterm_as_interrupt() -> None:
    """From now on, SIGTERM interrupts this process as Ctrl-C does (KeyboardInterrupt in the
    main thread, or the flag of ``sigint_sets``), whether SIGINT is at Python's default or
    ignored. Python's C-level signal handler writes the signal's number to a wake-up pipe even
    while the main thread is inside native code; a watcher thread reading it stops the solver
    running under ``sigint_stops``."""
    global _watching
    if _watching or not _in_main_thread() or os.name != "posix":
        return  # Windows: no wake-up pipe for signals (set_wakeup_fd wants a socket there)
    sigint = signal.getsignal(signal.SIGINT)
    if signal.getsignal(signal.SIGTERM) != signal.SIG_DFL or not (
            sigint is signal.default_int_handler or sigint == signal.SIG_IGN):
        return  # someone else handles the signals: leave them be
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)

    def watch() -> None:
        while True:
            received = os.read(read_end, 64)
            if signal.SIGINT in received or signal.SIGTERM in received:
                for stop in list(_stop_hooks):
                    stop()

    threading.Thread(target=watch, name="stop-signal-watcher", daemon=True).start()
    _watching = True
