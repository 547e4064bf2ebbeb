"""Slice-level scheduling (SCLS, Cheng et al. 2024): SCLS with its baselines SLS, SO, PM, AB, LB
(Fig. 15) as configurations (:mod:`.schedulers`) of the strategies (:mod:`.strategies`) that
the slice-level cluster simulation :mod:`llmopt.sim.slices` runs, where one padded static batch
is served a slice at a time (``serve_slice``)."""

from llmopt.policies.slice.schedulers import (
    LADDER,
    SCHEDULERS,
    SliceScheduler,
    replay_slices,
    scheduler,
)
from llmopt.sim.slices import SliceReplay

__all__ = ["LADDER", "SCHEDULERS", "SliceReplay", "SliceScheduler", "replay_slices", "scheduler"]
