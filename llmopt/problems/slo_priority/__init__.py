"""SLO-aware priority mapping of Huang et al. 2025 (SC'25): choose a priority order and the static
batch of every request to maximize G = n / t (eq 2), n the requests meeting their SLOs (eqs 6–7),
t the sum of their end-to-end latencies, waiting included (eqs 3–4, 10–12), under the bilinear
latency predictor (eqs 14–19).

Modules: ``model`` (the data, a plan and the evaluator of G), ``sa`` (Algorithm 1),
``exhaustive`` (the paper's strawman, the test oracle), ``exact`` (CP-SAT, parametric in the
number of met requests, with proof), ``cluster`` (Algorithm 2's planning), ``replayed`` (a plan
served on the simulation core, G of a replayed schedule), ``solve`` (the registry's entry
point).
"""
