"""Lazy references to implementations, and the registries that hold them.

A registry entry names its implementation as ``"package.module:attribute"`` and loads it on
first use, so that listing problems and policies (CLI help, ``llmopt list``, the docs' tables)
does not import the solvers (Pyomo, OR-Tools, HiGHS) and a replay imports only what it runs. An
entry added at run time (a notebook's own problem) may give the function itself.

A :class:`Registry` holds llmopt's own entries and, from the first time it is read, those that
installed packages declare under its entry-point group (``llmopt.policies``,
``llmopt.routers``, ``llmopt.problems``, ``llmopt.trace_formats``): a package extends llmopt
without forking it. An entry point names one entry or a list of them, e.g. in the package's
``pyproject.toml``::

    [project.entry-points."llmopt.policies"]
    shortest-prompt-first = "my_package.policies:SHORTEST_PROMPT_FIRST"

An entry point that cannot be loaded, is not of the registry's kind or takes a name already
registered is left out with a warning naming it.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from functools import cache
from importlib import metadata
from typing import Any, Generic, TypeVar, cast

from llmopt.errors import LlmoptWarning


def load(target: str | Callable[..., Any]) -> Any:
    """The attribute ``target`` (``"package.module:attribute"``) names, or ``target`` itself
    when it is already a function."""
    return target if callable(target) else _load(target)


@cache
def _load(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


class PluginWarning(LlmoptWarning):
    """An installed package's entry point could not be registered."""


@cache
def entry_points(group: str) -> tuple[metadata.EntryPoint, ...]:
    """The entry points of ``group`` of every installed package, in a stable order."""
    found = metadata.entry_points(group=group)
    return tuple(sorted(found, key=lambda ep: (ep.dist.name if ep.dist else "", ep.name)))


T = TypeVar("T")


class Registry(MutableMapping[str, T], Generic[T]):
    """Entries by name: llmopt's own, then (loaded on first read) those of the installed
    packages' entry points of ``group``, each an instance of ``kind`` (see the module doc)."""

    def __init__(self, group: str, kind: type, entries: Iterable[T]) -> None:
        self.group, self.kind = group, kind
        self._entries: dict[str, T] = {}
        for entry in entries:
            self._entries[entry.name] = entry  # type: ignore[attr-defined]
        self._extended = False

    def _all(self) -> dict[str, T]:
        if not self._extended:
            self._extended = True
            for ep in entry_points(self.group):
                self._add_plugin(ep)
        return self._entries

    def _add_plugin(self, ep: metadata.EntryPoint) -> None:
        where = f"entry point {ep.name!r} ({ep.value}) of group {self.group}"
        if ep.dist is not None:
            where += f" in package {ep.dist.name}"
        try:
            loaded = ep.load()
        except Exception as exc:  # a broken package must not break llmopt
            warnings.warn(f"{where} cannot be loaded: {type(exc).__name__}: {exc}",
                          PluginWarning, stacklevel=3)
            return
        entries = list(loaded) if isinstance(loaded, list | tuple) else [loaded]
        for entry in entries:
            name = getattr(entry, "name", None)
            if not isinstance(entry, self.kind) or not isinstance(name, str):
                warnings.warn(f"{where} is not a {self.kind.__name__}: left out", PluginWarning,
                              stacklevel=3)
            elif name in self._entries:
                warnings.warn(f"{where} registers {name!r}, which is taken: left out",
                              PluginWarning, stacklevel=3)
            else:
                self._entries[name] = cast(T, entry)

    def __getitem__(self, name: str) -> T:
        return self._all()[name]

    def __setitem__(self, name: str, entry: T) -> None:
        self._all()[name] = entry

    def __delitem__(self, name: str) -> None:
        del self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __contains__(self, name: object) -> bool:
        return name in self._all()

    def __repr__(self) -> str:
        return f"Registry({self.group!r}, {list(self._all())})"


__all__ = ["PluginWarning", "Registry", "entry_points", "load"]
