"""Experiments that several front ends share: the papers' case studies and the differential
cross-checks."""
