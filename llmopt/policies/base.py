"""The interfaces every scheduler plugs into, defined by the simulation floor
(:mod:`llmopt.sim.policy`): iteration policies (one per replica) with the replica view they read
and act on, and routers with theirs. Re-exported here for the policies' convenience."""

from __future__ import annotations

from llmopt.sim.batch import Batch
from llmopt.sim.policy import (
    DONE,
    PENDING,
    RUNNING,
    WAITING,
    IterationPolicy,
    ReplicaView,
    Router,
    RouterView,
    Steady,
)

__all__ = ["DONE", "PENDING", "RUNNING", "WAITING", "Batch", "IterationPolicy", "ReplicaView",
           "Router", "RouterView", "Steady"]
