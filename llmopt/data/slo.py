"""Service-level objectives (SLOs) of an instance: per-request targets on the time to first token
(TTFT), the time per output token (TPOT) and optionally the end-to-end latency (E2E).

Definitions (docs/guide.md, "SLOs and goodput"), all in milliseconds:

- TTFT = first token time − arrival;
- TPOT = (E2E − TTFT) / (output tokens − 1), for a request of at least two output tokens (a
  one-token request has no TPOT, and meets any TPOT target);
- E2E = finish time − arrival.

A request meets its SLO when every target it has holds (``<=``). The YAML section::

    slo:
      ttft_ms: 400            # the default targets of every request
      tpot_ms: 150
      e2e_ms: 20000           # optional
      classes:                # optional: named classes with a share of the requests
        - {name: chat, share: 0.7, ttft_ms: 400, tpot_ms: 150}
        - {name: code, share: 0.3, ttft_ms: 1000, tpot_ms: 100}
      seed: 0                 # assigns classes to the requests that name none
      multiple: 10            # instead of fixed targets: 10x the single-request latency
      basis: mean             # ... of a request of mean lengths (SOLA, Table 3) or of each
      scale: 1.0              # multiplies every target (a tightness knob for sweeps)

Precedence, per request and per target: the request's own field (``ttft_slo_ms`` … in a request
list, or ``slo_class``), then its class, then the section's targets, then ``multiple``. The
targets become fields of the requests and so part of the instance's content hash.

``multiple`` is SOLA's rule (Hong et al. 2025, section 6.1: 10x/15x of the single-request
latency for tight/loose SLOs on 7B-14B models, 5x/10x for 70B-72B): the single-request latency is
the TTFT and the TPOT a request has when it runs alone under the instance's cost profile
(:func:`single_request_ms`). With ``basis: mean`` one target pair is derived from a request of
the instance's mean input and output lengths (the paper gives one pair per model and dataset);
with ``basis: each`` every request gets its own.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from llmopt.data.cost.base import IterationCosts
from llmopt.data.ranges import MAX_MS
from llmopt.errors import InstanceError, LlmoptWarning

Target = Annotated[float, Field(gt=0, le=MAX_MS)]
SLO_FIELDS = ("ttft_slo_ms", "tpot_slo_ms", "e2e_slo_ms")
TARGETS = ("ttft_ms", "tpot_ms", "e2e_ms")
SHARE_TOLERANCE = 1e-6


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SloClass(_Strict):
    name: str = Field(min_length=1)
    share: Annotated[float, Field(gt=0, le=1)]
    ttft_ms: Target | None = None
    tpot_ms: Target | None = None
    e2e_ms: Target | None = None


class SloSpec(_Strict):
    """The ``slo`` section of an instance (see the module doc)."""

    ttft_ms: Target | None = None
    tpot_ms: Target | None = None
    e2e_ms: Target | None = None
    classes: list[SloClass] | None = None
    seed: Annotated[StrictInt, Field(ge=0)] = 0
    multiple: Annotated[float, Field(gt=0, le=1e6)] | None = None
    basis: Literal["mean", "each"] = "mean"
    scale: Annotated[float, Field(gt=0, le=1e6)] = 1.0


def single_request_ms(profile: IterationCosts, input_tokens: float, output_tokens: float
                      ) -> tuple[float, float]:
    """(TTFT, TPOT) in ms of one request running alone: its whole prompt in one prefill
    iteration, then one decode iteration per further output token, each reading the KVs cached
    so far (the mean context of those decodes is used, exact for a cost linear in it)."""
    i = max(float(input_tokens), 1.0)
    o = max(float(output_tokens), 1.0)
    ttft = profile.iteration_ms(round(i), 0, 0.0, i * i, 1)
    mean_context = i + max(o - 2.0, 0.0) / 2.0
    tpot = profile.iteration_ms(0, 1, mean_context, 0.0, 0)
    return ttft, tpot


def resolve_slos(spec: SloSpec | None, given: list[dict[str, float | str | None]],
                 inputs: np.ndarray, outputs: np.ndarray, profile: IterationCosts,
                 file: Path | None) -> list[dict[str, float | str | None]]:
    """The SLO fields of each request (``ttft_slo_ms``, ``tpot_slo_ms``, ``e2e_slo_ms``,
    ``slo_class``) from the request's own fields ``given`` (each may hold those) and ``spec``:
    a request naming no class gets one drawn with the classes' shares.
    Raises InstanceError on an unknown class, a class named without a ``classes`` list, and
    the sections of :func:`check_spec`."""
    n = len(given)
    if spec is None:
        for k, g in enumerate(given):
            if g.get("slo_class") is not None:
                raise InstanceError("names a class, but the instance has no slo.classes",
                                    file=file, field=f"requests[{k}].slo_class",
                                    value=g["slo_class"])
        return [{**{f: _scaled(g.get(f), 1.0) for f in SLO_FIELDS}, "slo_class": None}
                for g in given]
    check_spec(spec, any(g.get(f) is not None for g in given for f in SLO_FIELDS), file)
    classes = {c.name: c for c in spec.classes or []}
    drawn = _draw_classes(spec, n)
    derived = _derived_targets(spec, inputs, outputs, profile)
    out = []
    for k, g in enumerate(given):
        name = g.get("slo_class")
        if name is not None and name not in classes:
            raise InstanceError(f"unknown SLO class (one of: {', '.join(classes) or 'none'})",
                                file=file, field=f"requests[{k}].slo_class", value=name)
        cls = classes.get(str(name)) if name is not None else (
            spec.classes[drawn[k]] if spec.classes and drawn is not None else None)
        row: dict[str, float | str | None] = {"slo_class": None if cls is None else cls.name}
        for f, t in zip(SLO_FIELDS, TARGETS, strict=True):
            value = g.get(f)
            if value is None and cls is not None:
                value = getattr(cls, t)
            if value is None:
                value = getattr(spec, t)
            if value is None and derived is not None and t in derived:
                value = float(derived[t][k])
            row[f] = _scaled(value, spec.scale)
        out.append(row)
    without = [k for k, row in enumerate(out) if all(row[f] is None for f in SLO_FIELDS)]
    if without:
        warnings.warn(f"{file or 'the instance'}: {len(without)} of {n} requests have no SLO "
                      f"target (the first: requests[{without[0]}]); they meet their SLO in "
                      "every schedule", LlmoptWarning, stacklevel=2)
    return out


def check_spec(spec: SloSpec, requests_have_targets: bool, file: Path | None) -> None:
    """The ``classes`` list: at least one class, distinct names, shares summing to 1, and each
    class with a target unless the section gives defaults (its own targets or ``multiple``) or
    the requests carry their own. A section that gives no target at all (none of its own, in a
    class or derived) is refused unless the requests carry their own: a request without a
    target meets its SLO in every schedule, so a section forgotten that way would report full
    attainment (requests left without any target are warned about by ``resolve_slos``)."""
    defaults = spec.multiple is not None or any(getattr(spec, t) is not None for t in TARGETS)
    if spec.classes is not None:
        if not spec.classes:
            raise InstanceError("give at least one class, or leave classes out", file=file,
                                field="slo.classes")
        names = [c.name for c in spec.classes]
        for k, name in enumerate(names):
            if name in names[:k]:
                raise InstanceError("the class name is given twice", file=file,
                                    field=f"slo.classes[{k}].name", value=name)
        total = sum(c.share for c in spec.classes)
        if abs(total - 1.0) > SHARE_TOLERANCE:
            raise InstanceError(f"the shares sum to {total:g}, not 1", file=file,
                                field="slo.classes[*].share")
        for k, c in enumerate(spec.classes):
            if not (defaults or requests_have_targets) and all(getattr(c, t) is None
                                                               for t in TARGETS):
                raise InstanceError(
                    "the class has no target: give it ttft_ms, tpot_ms or e2e_ms (or give the "
                    "section's own targets or multiple)", file=file, field=f"slo.classes[{k}]",
                    value=c.name)
    elif not defaults and not requests_have_targets:
        raise InstanceError("the section gives no target: give ttft_ms, tpot_ms, e2e_ms, classes "
                            "or multiple", file=file, field="slo")


def _scaled(value: float | str | None, scale: float) -> float | None:
    return None if value is None else float(value) * scale


def _draw_classes(spec: SloSpec, n: int) -> np.ndarray | None:
    """The class index of every request, drawn with the classes' shares (seeded)."""
    if not spec.classes:
        return None
    shares = np.array([c.share for c in spec.classes])
    rng = np.random.default_rng(spec.seed)
    return rng.choice(len(shares), size=n, p=shares / shares.sum())


def _derived_targets(spec: SloSpec, inputs: np.ndarray, outputs: np.ndarray,
                     profile: IterationCosts) -> dict[str, np.ndarray] | None:
    if spec.multiple is None:
        return None
    n = len(inputs)
    if spec.basis == "mean":
        ttft, tpot = single_request_ms(profile, float(inputs.mean()), float(outputs.mean()))
        ttfts, tpots = np.full(n, ttft), np.full(n, tpot)
    else:
        pairs = [single_request_ms(profile, a, b) for a, b in zip(inputs, outputs, strict=True)]
        ttfts = np.array([p[0] for p in pairs])
        tpots = np.array([p[1] for p in pairs])
    return {"ttft_ms": spec.multiple * ttfts, "tpot_ms": spec.multiple * tpots}

