"""Slice-level scheduling (SCLS, Cheng et al. 2024): SCLS with its baselines SLS, SO, PM, AB, LB
(Fig. 15) as configurations (:mod:`.schedulers`) of the slice-level cluster simulation
:mod:`llmopt.sim.slices`, where one padded static batch is served a slice at a time
(``serve_slice``)."""

from llmopt.policies.slice.schedulers import LADDER, SCHEDULERS, replay_slices, scheduler
from llmopt.sim.slices import SliceReplay, SliceScheduler

__all__ = ["LADDER", "SCHEDULERS", "SliceReplay", "SliceScheduler", "replay_slices", "scheduler"]
