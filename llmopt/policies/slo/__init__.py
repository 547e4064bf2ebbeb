"""Schedulers of today's serving engines and SLO-aware papers: vLLM V1's scheduler
(``vllm_v1``); SOLA (Hong et al. 2025) belongs here too."""
