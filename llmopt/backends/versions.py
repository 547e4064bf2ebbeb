"""The version string of each back end, by the name the problems use for it."""

from __future__ import annotations

from llmopt.backends import cpsat, highs

VERSIONS = {"highs": highs.version, "cpsat": cpsat.version}


def version_of(backend: str) -> str:
    return VERSIONS[backend]()
