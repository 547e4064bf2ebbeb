"""A proven ceiling on SLO attainment at trace scale (issue 32): relaxations that bound how many
requests can meet their SLOs in any schedule under the InferMax cost model, and the largest
arrival rate at which that ceiling still allows an attainment level (the goodput ceiling)."""
