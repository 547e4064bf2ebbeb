"""Interrupts: SIGTERM (what ``timeout``, batch schedulers and containers send) is handled as
Ctrl-C; Python's own SIGINT handler is put back after a solver that installs its own; and
while HiGHS runs, Ctrl-C sets a flag its callback polls.

CP-SAT, asked to catch SIGINT, replaces the process's C-level SIGINT handler and does not put
Python's back: Python still believes its handler is installed, and the next Ctrl-C outside a
solver call would kill the process. ``python_sigint_restored`` re-installs it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

_watching = False


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


def sigterm_as_interrupt() -> None:
    """From now on, SIGTERM interrupts this process as Ctrl-C does. Python's C-level signal
    handler writes the signal's number to a wake-up pipe even while the main thread is inside
    native code; a watcher thread reading it sends SIGINT, which a running solver catches (it
    stops and keeps its incumbent) and which otherwise raises KeyboardInterrupt."""
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
                os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, name="sigterm-as-ctrl-c", daemon=True).start()
    _watching = True
