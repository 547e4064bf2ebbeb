"""Errors a user can cause.

Every mistake in an instance, a profile, a trace or a command-line option raises one
:class:`LlmoptError` subclass whose message names the file, the field and the value, so that the
CLI can print it on one line and exit with code 2. What is accepted but worth saying (a trace
read out of order, then sorted) is an :class:`LlmoptWarning`, which the CLI prints as one line.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


class LlmoptError(Exception):
    """Base class of all errors caused by user input."""

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        field: str | None = None,
        value: Any = None,
        has_value: bool | None = None,
    ) -> None:
        self.file = str(file) if file is not None else None
        self.field = field
        if type(value).__module__ == "numpy" and hasattr(value, "item"):
            value = value.item()  # shown as 5.5, not np.float64(5.5)
        self.value = value
        self.has_value = has_value if has_value is not None else value is not None
        self.reason = message
        super().__init__(self._render())

    def in_file(self, file: str | Path) -> LlmoptError:
        """The same error, naming ``file`` (for errors raised by code that reads no file)."""
        return type(self)(self.reason, file=file, field=self.field, value=self.value,
                          has_value=self.has_value)

    def _render(self) -> str:
        parts = []
        if self.file:
            parts.append(_printable(self.file))
        if self.field:
            parts.append(_printable(self.field))
        if self.has_value:
            shown = repr(self.value)
            if len(shown) > 80:
                shown = shown[:77] + "..."
            parts.append(f"value {shown}")
        prefix = ": ".join(parts)
        reason = " ".join(self.reason.splitlines())
        return f"{prefix}: {reason}" if prefix else reason


def _printable(text: str) -> str:
    """``text`` with control characters escaped (a key holding a newline stays on one line)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def unknown_name(kind: str, value: Any, known: Iterable[str]) -> str:
    """The reason of an unknown name of a ``kind`` (policy, problem, …): the closest known
    names first (``did you mean 'sarathi'?``), then every known name."""
    names = list(known)
    close = difflib.get_close_matches(str(value), names, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return f"unknown {kind} ({hint}known: {', '.join(names) or 'none'})"


class InputFileError(LlmoptError):
    """A file is missing, unreadable or not valid YAML/CSV/JSON."""


class InstanceError(LlmoptError):
    """An instance file has a missing, malformed or inconsistent field."""


class ProfileError(LlmoptError):
    """A cost profile is unknown or malformed."""


class TraceError(LlmoptError):
    """A request trace has the wrong columns or bad values."""


class OptionError(LlmoptError):
    """A command-line option or solve setting has an unknown or invalid value."""


class SolutionFileError(LlmoptError):
    """A solution file cannot be read or lacks required keys."""


class InternalError(RuntimeError):
    """An invariant of llmopt broke: a bug, never the user's input (the CLI exits 1 and keeps
    the traceback in a log file)."""


class LlmoptWarning(UserWarning):
    """Input accepted, but not exactly as written, or a result to read with care."""


def one_line_warnings(print_line: Callable[[str], None],
                      default: Callable[..., None]) -> Callable[..., None]:
    """A ``warnings.showwarning`` that prints each :class:`LlmoptWarning` as one line
    ``warning: <message>``, each message once (the same trace may be read more than once);
    other warnings (a library's) go to ``default``."""
    shown: set[str] = set()

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        if not issubclass(category, LlmoptWarning):
            default(message, category, filename, lineno, file, line)
            return
        text = str(message)
        if text not in shown:
            shown.add(text)
            print_line(f"warning: {text}")

    return show
