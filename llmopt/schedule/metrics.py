"""Per-request latencies and SLO attainment of a schedule (docs/guide.md, "SLOs and goodput").

Per request (ms): TTFT = first token − arrival; TPOT = (E2E − TTFT) / (output tokens − 1) for
requests of two or more output tokens (NaN otherwise: such a request meets any TPOT target);
E2E = finish − arrival; normalized latency = E2E / output tokens (ms per token, as in vLLM's and
Orca's evaluations). A target is met when the latency is at most the target (a request without
that target meets it); a request meets its SLO when it meets every target it has.

Attainment = share of requests meeting a target (``attainment_ttft``, ``attainment_tpot``,
``attainment_e2e``) or all of theirs (``attainment``), over every request of the instance.
The goodput of a run (``goodput_rps``) = requests meeting their SLO / makespan (s); goodput as
the largest arrival rate meeting an attainment level is a search over rates (``llmopt.sweep``).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import pandas as pd

from llmopt.data.instance import Instance
from llmopt.errors import InternalError

MET_TOLERANCE_MS = 1e-6  # times are sums of floats: a target met up to rounding is met
ATTAINMENT_METRICS = ("attainment", "attainment_ttft", "attainment_tpot", "attainment_e2e",
                      "normalized_latency_mean_ms", "goodput_rps")


class Timed(Protocol):
    """What the latencies are read from: a :class:`~llmopt.schedule.Schedule` (its table of
    requests; named here by its shape, as ``Schedule.metrics`` calls these functions)."""

    requests: pd.DataFrame

    @property
    def makespan_ms(self) -> float: ...

    def queueing_delays(self) -> pd.Series: ...


def request_latencies(schedule: Timed, instance: Instance) -> pd.DataFrame:
    """One row per request of ``instance`` (its order): ``request, slo_class, ttft_ms, tpot_ms,
    e2e_ms, normalized_latency_ms, queue_ms`` (arrival to first scheduled), the targets
    ``ttft_slo_ms, tpot_slo_ms, e2e_slo_ms`` (NaN: none), and ``ttft_met, tpot_met, e2e_met,
    slo_met``."""
    req = schedule.requests.assign(request=schedule.requests["request"].astype(str))
    req = req.set_index("request").reindex(instance.ids)
    if req["finish_ms"].isna().any():
        missing = req.index[req["finish_ms"].isna()][0]
        raise InternalError(f"the schedule has no finish time for request {missing}")
    arrival = instance.arrival_ms
    first = req["first_token_ms"].to_numpy(dtype=float)
    finish = req["finish_ms"].to_numpy(dtype=float)
    outputs = instance.output_tokens
    ttft = first - arrival
    e2e = finish - arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(outputs > 1, (e2e - ttft) / (outputs - 1), np.nan)
    out = pd.DataFrame({
        "request": instance.ids,
        "slo_class": [r.slo_class for r in instance.requests],
        "ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": e2e,
        "normalized_latency_ms": e2e / outputs,
        "queue_ms": schedule.queueing_delays().reindex(instance.ids).to_numpy(dtype=float),
    })
    met = np.ones(len(out), dtype=bool)
    for name, value in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
        target = instance.slo_targets(f"{name}_slo_ms")
        out[f"{name}_slo_ms"] = target
        ok = np.isnan(target) | np.isnan(value) | (value <= target + MET_TOLERANCE_MS)
        out[f"{name}_met"] = ok
        met &= ok
    out["slo_met"] = met
    return out


def attainment(latencies: pd.DataFrame) -> dict[str, float]:
    """Attainment metrics of a :func:`request_latencies` table (shares in [0, 1]); the
    attainment of a target no request has is left out."""
    out = {"attainment": float(latencies["slo_met"].mean())}
    for name in ("ttft", "tpot", "e2e"):
        if latencies[f"{name}_slo_ms"].notna().any():
            out[f"attainment_{name}"] = float(latencies[f"{name}_met"].mean())
    out["normalized_latency_mean_ms"] = float(latencies["normalized_latency_ms"].mean())
    return {k: round(v, 6) for k, v in out.items()}


def attainment_by_class(latencies: pd.DataFrame) -> pd.DataFrame:
    """Attainment per SLO class: ``slo_class, requests, attainment``."""
    grouped = latencies.groupby(latencies["slo_class"].fillna("(none)"), sort=True)
    return pd.DataFrame({"requests": grouped.size(),
                         "attainment": grouped["slo_met"].mean()}).reset_index()


def slo_metrics(schedule: Timed, instance: Instance) -> dict[str, float]:
    """The attainment metrics of ``schedule`` and the run's goodput (empty when the instance
    has no SLOs)."""
    if not instance.has_slos:
        return {}
    latencies = request_latencies(schedule, instance)
    makespan_s = schedule.makespan_ms / 1000.0
    goodput = float(latencies["slo_met"].sum()) / makespan_s if makespan_s > 0 else 0.0
    return {**attainment(latencies), "goodput_rps": round(goodput, 6)}
