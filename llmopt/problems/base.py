"""What every problem family shares: lower bounds with the time model they hold under, and the
simulation engine as a solver may use it.

Problems (models and solvers) import no engine and no policy: a solver that starts from the
schedules of the replay engine's policies, or that times its plan by following it on the engine,
is given a :class:`Simulation` by the workflow that runs it (``llmopt.problems.api.solve``,
which passes ``llmopt.problems.workflows.simulation.ENGINE``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from llmopt.data.instance import Instance
    from llmopt.schedule import Schedule


@dataclass
class Bound:
    """One lower bound on total inference time (ms) with its parts."""

    name: str
    value_ms: float
    equation: str
    valid_under: str
    why: str
    time_model: str
    parts: dict[str, float] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)
    #: it holds for schedules with automatic prefix caching too (``system.prefix_caching``): a
    #: bound that counts every prompt token as computed does not
    holds_with_prefix_cache: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def gap_bounds(bounds: list[Bound], time_model: str, instance: Instance) -> list[Bound]:
    """The bounds that may measure a replay's gap: valid under the replays' time model and,
    when the instance caches prefixes, with a prefix cache."""
    caching = instance.system.prefix_caching
    return [b for b in bounds if b.time_model == time_model
            and (b.holds_with_prefix_cache or not caching)]


class Simulation(Protocol):
    """The replay engine as a solver sees it (see the module doc)."""

    def heuristics(self, instance: Instance, problem: str
                   ) -> list[tuple[str, Callable[[], Schedule]]]:
        """(policy, its replay) for each registered policy whose schedules start ``problem``'s
        solvers (``PolicyInfo.incumbent_for``), in the registry's order; a replay runs when
        called, and raises the policy's ``LlmoptError`` when it cannot run the instance."""
        ...

    def follow(self, instance: Instance, plan: Mapping[str, Any], name: str = "plan", *,
               fast: bool = True) -> Schedule:
        """A solution's plan (its data, as ``llmopt replay --policy plan --plan`` reads them)
        followed by the engine; ``name`` names the schedule."""
        ...
