"""How a registered iteration-level policy is deployed: its factory (``PolicyInfo.deploy``)
takes the instance, the policy's name and, where they apply, a solution's plan, a router and
the progress display, and returns the :class:`~llmopt.sim.cluster.Deployment` that the
cluster simulation runs (one policy per replica and the router that feeds them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from llmopt.data.instance import Instance
from llmopt.errors import OptionError
from llmopt.policies.base import IterationPolicy, Router
from llmopt.policies.routing import RoundRobin
from llmopt.progress import SILENT, Progress
from llmopt.sim.cluster import Deployment


class Deploy(Protocol):
    def __call__(self, instance: Instance, name: str, *,
                 plan: Mapping[str, Any] | None = None, router: Router | None = None,
                 progress: Progress = ...) -> Deployment: ...


def each_replica(instance: Instance, name: str, make: Callable[[], IterationPolicy],
                 router: Router | None) -> Deployment:
    """``make()`` on every replica of the system, round-robin unless another router is
    given."""
    return Deployment(name, [make() for _ in range(instance.system.instances)],
                      router or RoundRobin())


def per_replica(make: Callable[[], IterationPolicy]) -> Deploy:
    """The factory of a policy that runs ``make()`` on every replica (``PolicyInfo.deploy`` of
    most policies): round-robin unless another router is given."""

    def deploy(instance: Instance, name: str, *, plan: Mapping[str, Any] | None = None,
               router: Router | None = None, progress: Progress = SILENT) -> Deployment:
        return each_replica(instance, name, make, router)

    return deploy


def no_router(router: Router | None, what: str) -> None:
    """Refuse a router for a deployment that fixes the replica of every request."""
    if router is not None:
        raise OptionError(f"{what} fixes its replica; no router applies", field="--router",
                          value=router.name)


__all__ = ["Deploy", "Deployment", "each_replica", "no_router", "per_replica"]
