"""The exact upper bound on SLO attainment (``llmopt.problems.infermax.attainment``) run with
the replay engine, which gives it the policies' schedules to start from and replays its plans."""

from __future__ import annotations

from llmopt.data.instance import Instance
from llmopt.problems.infermax import attainment
from llmopt.problems.infermax.attainment import MAX_ATTAINMENT_REQUESTS, AttainmentBound
from llmopt.problems.workflows.simulation import ENGINE
from llmopt.progress import SILENT, Progress


def attainment_bound(instance: Instance, time_limit_s: float = 10.0, workers: int = 2,
                     progress: Progress = SILENT, heuristics: bool = True) -> AttainmentBound:
    """See :func:`llmopt.problems.infermax.attainment.attainment_bound`."""
    return attainment.attainment_bound(instance, time_limit_s, workers, progress, heuristics,
                                       simulation=ENGINE)


__all__ = ["MAX_ATTAINMENT_REQUESTS", "AttainmentBound", "attainment_bound"]
