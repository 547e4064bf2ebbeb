"""Slice-level scheduling (SCLS), Cheng et al. 2024: batching (partition) and offloading."""
