"""The InferMax schedulers (Kim et al. 2025): the unified scheduler of Algorithm 1
(``unified``) and its configurations (``configs``), plans of batches followed exactly
(``planned``), and their deployment on a cluster (``deploy``)."""
