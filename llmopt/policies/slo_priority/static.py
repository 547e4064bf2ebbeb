"""Static batches in priority order, as Huang et al. 2025 serve a priority mapping (section 4.4,
"Request Scheduling"; section 5.1, "Workflows": the requests of a batch are sent together, the
next batch only after it).

A plan is a list of batches of request indices in priority order (eq 10's cut of the order p).
Batch k is admitted as a whole, all its prompts prefilled in one iteration, once batch k − 1 has
entirely finished (eq 11: a batch lasts as long as its longest request) and its own requests have
arrived; its members then decode together until each has produced its output, the batch
shrinking as members finish (the core's iteration-level batch; the paper's predictor keeps b
fixed for a request's whole life, eqs 14–16). Nothing else runs meanwhile.

The first output token comes from the first decode (``first_token_from_prefill = False``): eq 16
sums l_o decode steps after the prefill (see ``llmopt.data.cost.bilinear``). Each admitted
request reserves its whole I + O KVs, so a finite ``system.kv_capacity`` is checked per batch up
front and nothing is ever evicted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from llmopt.data.instance import Instance
from llmopt.errors import InstanceError, SolutionFileError
from llmopt.policies.base import DONE, WAITING, Batch, IterationPolicy, ReplicaView, Steady

UNTIL_A_MEMBER_FINISHES = Steady(math.inf, until_arrival=False)


class StaticBatches(IterationPolicy):
    """Serves ``batches`` (request indices, in priority order) one after another on one
    replica (see the module doc)."""

    first_token_from_prefill = False

    def __init__(self, batches: Sequence[Sequence[int]], name: str = "plan",
                 field: str = "batches") -> None:
        self.name = name
        self.batches = [list(b) for b in batches]
        self.field = field  # where the plan's batches are, for error messages
        self._next = 0
        self._current: list[int] = []

    def check(self, instance: Instance, replica: ReplicaView) -> None:
        if instance.profile.family != "bilinear":
            raise InstanceError("static priority batches replay on the bilinear predictor "
                                "(Huang et al. eqs 14-16)", file=instance.label(),
                                field="model", value=instance.profile.name)
        ids = instance.ids
        for k, members in enumerate(self.batches):
            if len(members) > replica.J:
                raise SolutionFileError(
                    f"batch {k} has {len(members)} requests, more than the {replica.J} "
                    f"clients (system.clients) of {instance.label()}",
                    field=f"{self.field}[{k}]", value=[ids[i] for i in members])
            need = sum(replica.I[i] + replica.O[i] for i in members)
            if need > replica.M:
                raise SolutionFileError(
                    f"batch {k} needs {need} KV tokens (input + output), more than "
                    f"system.kv_capacity = {replica.M:g}", field=f"{self.field}[{k}]",
                    value=[ids[i] for i in members])

    def reservation(self, replica: ReplicaView, i: int) -> int:
        return replica.I[i] + replica.O[i]

    def next_batch(self, r: ReplicaView) -> Batch | None:
        if any(r.status[i] != DONE for i in self._current):
            n = r.n_decoders()
            if not n:
                return None
            b = Batch(math.inf, math.inf, math.inf)
            b.add_all_decodes(n)
            return b
        if self._next >= len(self.batches):
            return None
        members = self.batches[self._next]
        start = max([r.t, *(r.arr[i] for i in members)])
        if start > r.t:
            r.wake_at = start  # the batch waits for its requests to arrive
            return None
        b = r.new_batch(math.inf, math.inf)
        for i in members:
            if r.status[i] != WAITING or r.replica_of[i] != r.index:
                raise SolutionFileError(
                    f"batch {self._next} names {r.instance.ids[i]}, which is not waiting on "
                    f"model instance {r.index}", field=f"{self.field}[{self._next}]")
            r.take_waiting(i)
            need = self.reservation(r, i)
            r.admit(i, r.I[i], need, b)
        self._current = members
        self._next += 1
        return b

    def steady(self, replica: ReplicaView, batch: Batch) -> Steady | None:
        """The batch's members decode together until one of them finishes (the replica's own
        event); arrivals change nothing before the batch has finished."""
        return UNTIL_A_MEMBER_FINISHES
