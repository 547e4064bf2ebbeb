"""Slice-level scheduling (SCLS, Cheng et al. 2024): what serving one padded static batch for a
slice does to its requests. The cluster-level SCLS policy (periodic pool, re-batching across
replicas) is not on the simulation core yet (issue 17)."""
