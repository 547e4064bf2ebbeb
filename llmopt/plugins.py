"""Lazy references to implementations, as the registries hold them.

A registry entry names its implementation as ``"package.module:attribute"`` and loads it on
first use, so that listing problems and policies (CLI help, ``llmopt list``, the docs' tables)
does not import the solvers (Pyomo, OR-Tools, HiGHS) and a replay imports only what it runs. An
entry added at run time (a notebook's own problem) may give the function itself.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import cache
from typing import Any


def load(target: str | Callable[..., Any]) -> Any:
    """The attribute ``target`` (``"package.module:attribute"``) names, or ``target`` itself
    when it is already a function."""
    return target if callable(target) else _load(target)


@cache
def _load(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)
