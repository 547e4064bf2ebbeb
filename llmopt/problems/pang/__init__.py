"""The problems of Pang et al. 2025: offline bin packing (eqs 26–30) and PD competition
(eqs 1–25), with their bounds."""
