"""Lazy references to implementations, as the registries hold them.

A registry entry names its implementation as ``"package.module:attribute"`` and loads it on
first use, so that listing problems and policies (CLI help, ``llmopt list``, the docs' tables)
does not import the solvers (Pyomo, OR-Tools, HiGHS) and a replay imports only what it runs.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any


@cache
def load(target: str) -> Any:
    """The attribute ``target`` (``"package.module:attribute"``) names."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)
