"""Schedulers of today's serving engines and SLO-aware papers: vLLM V1's scheduler
(``vllm_v1``) and SOLA (Hong et al. 2025, ``sola``) with the baselines of its evaluation
(``baselines``), deployed one per replica (``deploy``)."""
