"""Slice-level scheduling (SCLS, Cheng et al. 2024): one padded static batch served for a slice
(:mod:`.execution`), and SCLS with its baselines SLS, SO, PM, AB, LB (Fig. 15) as configurations
of the slice-level cluster simulation :mod:`llmopt.sim.slices` (:mod:`.schedulers`)."""

from llmopt.policies.slice.schedulers import LADDER, SCHEDULERS, replay_slices, scheduler
from llmopt.sim.slices import SliceReplay, SliceScheduler

__all__ = ["LADDER", "SCHEDULERS", "SliceReplay", "SliceScheduler", "replay_slices", "scheduler"]
