"""Serving Huang et al. 2025 (SLO-aware priority mapping) on the simulation core: a
``slo-priority`` plan as static batches in priority order (``static``), and the paper's
continuous FCFS baseline, vLLM (``fcfs``); their deployment (``deploy``)."""
