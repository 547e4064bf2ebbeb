"""The ranges every number read from an instance, a profile, a generator or a trace must lie in
(docs/guide.md, Errors). Floats must also be finite."""

from __future__ import annotations

MAX_TOKENS = 10**9          # one token count: a request's lengths, KV capacity, batch budgets
MAX_CLIENTS = 10**6         # client slots per model instance
MAX_INSTANCES = 10**4       # model instances (replicas)
MAX_REQUESTS = 10**7        # requests in one instance
MAX_MS = 1e12               # a time in ms (arrivals, profile coefficients): about 31 years
MAX_RATE_PER_S = 1e9        # arrival rate of a generator
