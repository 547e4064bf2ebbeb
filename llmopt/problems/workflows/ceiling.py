"""The proven ceiling on SLO attainment beside replayed schedules (issue 32, item 2): what
``llmopt compare`` and ``llmopt replay`` print as "at most X of N requests (Y %) can meet their
SLOs in any schedule (method: …)".

``policy_ceilings(instance, schedules, time_limit_s)`` asks the instance's profile family for
its ceiling (``FamilyInfo.slo_ceiling`` in ``llmopt.problems.registry``; the InferMax family's
is ``llmopt.problems.slo_ceiling``: the best of its relaxations that ran within the time, and
the exact attainment model where it applies and finishes). A ceiling holds only for the
schedules its cost model and rules cover: it is computed once for the schedules that respect
the KV memory M, and once more without the KV rule when a policy that ignores M (a registered
policy marked ``hypothetical``, such as ``vllm-unlimited``) is among them, so that each schedule
is held only against the ceiling valid for it (``PolicyCeilings.for_schedule``). With several
model instances it covers any router: the router is part of the schedule.

Ctrl-C (or SIGTERM) while a ceiling runs stops it between its relaxations and inside its flows;
the best bound found so far is kept and marked ``interrupted``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from llmopt.data.instance import Instance
from llmopt.errors import LlmoptError
from llmopt.plugins import load
from llmopt.policies.registry import POLICIES
from llmopt.problems.registry import FAMILIES
from llmopt.problems.slo_ceiling.ceiling import AttainmentCeiling, attainment_ceiling
from llmopt.problems.workflows.simulation import ENGINE
from llmopt.progress import SILENT, Progress
from llmopt.signals import sigint_sets

WITHIN_MEMORY_SHARE = 0.8  # of the time, when a second ceiling (M ignored) follows
MIN_CEILING_S = 0.5        # a ceiling gets at least this: the closed-form bound and a flow

CeilingHook = Callable[..., AttainmentCeiling]


def infermax_ceiling(instance: Instance, time_limit_s: float,
                     stop: Callable[[], bool] | None = None, memory: bool = True,
                     exact: bool = True) -> AttainmentCeiling:
    """The InferMax family's ceiling (``attainment_ceiling``), with the exact attainment model
    run on the replay engine where it applies (``exact``; it respects M, so only with
    ``memory``)."""
    return attainment_ceiling(instance, time_limit_s, stop=stop, memory=memory,
                              exact=exact and memory, simulation=ENGINE)


def ignores_memory(schedule: str) -> bool:
    """Whether the schedule of this name comes from a policy that ignores the KV memory M
    (the registry's ``hypothetical``); solver rows and plans respect it."""
    return schedule in POLICIES and POLICIES[schedule].hypothetical


@dataclass(frozen=True)
class PolicyCeilings:
    """The ceilings of one instance's schedules: ``within_memory`` for those respecting M,
    ``ignoring_memory`` for those ignoring it (None: not needed, or not computed, ``note``
    says why), ``ignoring`` the names of the latter."""

    within_memory: AttainmentCeiling | None = None
    ignoring_memory: AttainmentCeiling | None = None
    ignoring: tuple[str, ...] = ()
    note: str = ""
    signalled: bool = False  # a stop signal (Ctrl-C, SIGTERM) came while they ran

    def for_schedule(self, name: str) -> AttainmentCeiling | None:
        """The ceiling that holds for the schedule ``name``."""
        return self.ignoring_memory if ignores_memory(name) else self.within_memory

    @property
    def interrupted(self) -> bool:
        """Some bound did not run (its time was up, or a stop signal came)."""
        return self.signalled or any(c is not None and c.interrupted
                                     for c in (self.within_memory, self.ignoring_memory))

    def lines(self) -> list[str]:
        """The sentences to print: the ceiling, the one for schedules ignoring M, the note."""
        out = []
        if self.within_memory is not None:
            out.append(f"SLO ceiling: {self.within_memory.sentence()}")
        if self.ignoring_memory is not None:
            out.append(f"SLO ceiling for {', '.join(self.ignoring)} (ignores the KV memory M): "
                       f"{self.ignoring_memory.sentence()}")
        if self.note:
            out.append(self.note)
        return out


def policy_ceilings(instance: Instance, schedules: Iterable[str], time_limit_s: float,
                    progress: Progress = SILENT, exact: bool = True) -> PolicyCeilings | None:
    """The ceilings valid for ``schedules`` (policy names, or solver rows, which respect M)
    within ``time_limit_s`` in all; None when the instance has no SLO targets. ``exact``:
    also the exact attainment model where it applies."""
    if not instance.has_slos:
        return None
    family = instance.profile.family
    info = FAMILIES.get(family)
    if info is None or not info.slo_ceiling:
        having = ", ".join(name for name, f in FAMILIES.items() if f.slo_ceiling) or "none"
        why = f": {info.unbounded_why}" if info is not None and info.unbounded_why else ""
        return PolicyCeilings(note=f"no proven SLO ceiling for profile family {family} "
                                   f"(llmopt has one for: {having}){why}")
    names = list(dict.fromkeys(schedules))
    ignoring = tuple(n for n in names if ignores_memory(n))
    within = any(not ignores_memory(n) for n in names) or not names
    hook: CeilingHook = load(info.slo_ceiling)
    stop = threading.Event()
    found: dict[bool, AttainmentCeiling] = {}
    notes: list[str] = []
    with sigint_sets(stop):
        for memory in ((True,) if within else ()) + ((False,) if ignoring else ()):
            if stop.is_set():
                notes.append("the ceiling without the KV rule was not computed (interrupted)")
                break
            if not memory and True in found and instance.system.prefix_caching:
                found[False] = found[True]    # with a prefix cache no ceiling uses the KV rule
                break
            share = WITHIN_MEMORY_SHARE if memory and ignoring else 1.0
            limit = max(share * time_limit_s if memory else
                        time_limit_s - sum(c.runtime_s for c in found.values()), MIN_CEILING_S)
            progress.stage("the SLO attainment ceiling" + ("" if memory else
                                                           " without the KV rule"))
            try:
                found[memory] = hook(instance, time_limit_s=limit, stop=stop.is_set,
                                     memory=memory, exact=exact)
            except LlmoptError as exc:
                notes.append(f"SLO ceiling not computed: {exc}")
                break
    return PolicyCeilings(found.get(True), found.get(False), ignoring, "; ".join(notes),
                          stop.is_set())


__all__ = ["PolicyCeilings", "ignores_memory", "infermax_ceiling", "policy_ceilings"]
