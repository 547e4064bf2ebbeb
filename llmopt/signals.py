"""Interrupts: SIGTERM (what ``timeout``, batch schedulers and containers send) is handled as
Ctrl-C; Python's own SIGINT handler is put back after a solver that installs its own; while
HiGHS runs, Ctrl-C sets a flag its callback polls; and while CP-SAT runs in the CLI, Ctrl-C
stops its search from a watcher thread.

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
_stop_hooks: list[Callable[[], None]] = []  # what Ctrl-C calls from the watcher thread


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


@contextlib.contextmanager
def sigint_sets(flag: threading.Event) -> Iterator[None]:
    """While the body runs (a solver whose Python callback polls ``flag``), Ctrl-C sets
    ``flag`` instead of raising KeyboardInterrupt inside the solver's callback."""
    if not _in_main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda *_: flag.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def sigint_stops(stop: Callable[[], None], flag: threading.Event) -> Iterator[bool]:
    """While the body runs (a native solver searching on its own threads), Ctrl-C calls
    ``stop`` from the watcher thread and sets ``flag`` instead of raising KeyboardInterrupt.
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
    """From now on, SIGTERM interrupts this process as Ctrl-C does. Python's C-level signal
    handler writes the signal's number to a wake-up pipe even while the main thread is inside
    native code; a watcher thread reading it sends SIGINT for a SIGTERM, and for a SIGINT
    stops the solver running under ``sigint_stops``. A SIGINT otherwise raises
    KeyboardInterrupt (or sets the flag of ``sigint_sets``) in the main thread."""
    global _watching
    if _watching or not _in_main_thread() or os.name != "posix":
        return  # Windows: no wake-up pipe for signals (set_wakeup_fd wants a socket there)
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return  # SIGINT ignored (a background job) or handled by someone else: leave SIGTERM be
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)

    def watch() -> None:
        while True:
            received = os.read(read_end, 64)
            if signal.SIGTERM in received:
                os.kill(os.getpid(), signal.SIGINT)  # comes back here as SIGINT
            if signal.SIGINT in received:
                for stop in list(_stop_hooks):
                    stop()

    threading.Thread(target=watch, name="sigterm-as-ctrl-c", daemon=True).start()
    _watching = True
