"""The replay engine given to the solvers (``llmopt.problems.base.Simulation``): the registered
policies' schedules and a solution's plan followed, through ``llmopt.policies.replay``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from llmopt.data.instance import Instance
from llmopt.policies.registry import incumbent_policies
from llmopt.policies.replay import replay
from llmopt.schedule import Schedule


class ReplayEngine:
    def heuristics(self, instance: Instance, problem: str
                   ) -> list[tuple[str, Callable[[], Schedule]]]:
        return [(name, partial(replay, instance, name)) for name in incumbent_policies(problem)]

    def follow(self, instance: Instance, plan: Mapping[str, Any], name: str = "plan", *,
               fast: bool = True) -> Schedule:
        return replay(instance, "plan", plan=plan, fast=fast, name=name)


ENGINE = ReplayEngine()

__all__ = ["ENGINE", "ReplayEngine"]
