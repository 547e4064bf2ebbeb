"""Instances: a workload (requests), a serving system and a cost profile, loaded from YAML.

The YAML contract (later issues add fields; these stay stable)::

    name: gsm8k-llama65b
    model: pang-llama65b-ascend8      # profile name in models/, a path, or an inline mapping
    system: {clients: 200, kv_capacity: 131072, max_batch_tokens: 4096,
             max_prefill_tokens: 4096, instances: 1}
    requests: [...]                   # exactly one of: a list, {trace: ...}, {generate: ...}
    solve: {problem: binpacking, solver: auto, time_limit_s: 60}

Paths are relative to the instance file. Generated requests are deterministic for a seed and get
ids ``r0, r1, …``; trace requests get ``r<row>`` with ``row`` the 0-based data row of the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    StrictInt,
    field_validator,
)

from llmopt.data.cost import CostProfile, load_profile
from llmopt.data.ranges import (
    MAX_CLIENTS,
    MAX_INSTANCES,
    MAX_MS,
    MAX_RATE_PER_S,
    MAX_REQUESTS,
    MAX_TOKENS,
)
from llmopt.data.traces import TRACE_FORMATS, read_trace
from llmopt.errors import InstanceError, LlmoptError, TraceError
from llmopt.files import (
    SAFE_NAME_RULE,
    is_safe_name,
    load_yaml_mapping,
    sha256_of,
    validated,
)

TokenCount = Annotated[StrictInt, Field(ge=1, le=MAX_TOKENS)]
Length = Annotated[float, Field(ge=-MAX_TOKENS, le=MAX_TOKENS)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Request(_Strict):
    """One inference request: prompt length, output length, arrival time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    input_tokens: TokenCount
    output_tokens: TokenCount
    arrival_ms: Annotated[float, Field(ge=0, le=MAX_MS)] = 0.0


class System(_Strict):
    """The serving system: client slots (J), KV capacity (M), batch budgets (C, P), instances."""

    clients: Annotated[StrictInt, Field(ge=1, le=MAX_CLIENTS)]
    kv_capacity: TokenCount | None = None
    max_batch_tokens: TokenCount | None = None
    max_prefill_tokens: TokenCount | None = None
    instances: Annotated[StrictInt, Field(ge=1, le=MAX_INSTANCES)] = 1


class SolveDefaults(_Strict):
    problem: str | None = None
    solver: str | None = None
    time_limit_s: PositiveFloat | None = None


class Distribution(_Strict):
    """A length distribution, sampled and rounded to integers clipped to [min, max]."""

    dist: Literal["constant", "normal", "lognormal", "uniform"]
    value: Length | None = None
    mean: Length | None = None
    std: Annotated[float, Field(ge=0, le=MAX_TOKENS)] | None = None
    low: Length | None = None
    high: Length | None = None
    min: Annotated[StrictInt, Field(le=MAX_TOKENS)] = 1
    max: TokenCount | None = None

    def sample(self, rng: np.random.Generator, n: int, where: str, file: Path) -> np.ndarray:
        def need(name: str) -> float:
            v = getattr(self, name)
            if v is None:
                raise InstanceError(f"required for dist {self.dist!r}", file=file,
                                    field=f"{where}.{name}")
            return float(v)

        if self.dist == "constant":
            x = np.full(n, need("value"))
        elif self.dist == "normal":
            x = rng.normal(need("mean"), need("std"), n)
        elif self.dist == "lognormal":
            mean, std = need("mean"), need("std")
            if mean <= 0:
                raise InstanceError("lognormal mean must be positive", file=file,
                                    field=f"{where}.mean", value=mean)
            sigma2 = np.log1p((std / mean) ** 2)
            x = rng.lognormal(np.log(mean) - sigma2 / 2, np.sqrt(sigma2), n)
        else:
            low, high = need("low"), need("high")
            if high < low:
                raise InstanceError("high must be >= low", file=file, field=f"{where}.high",
                                    value=high)
            x = rng.uniform(low, high, n)
        lo = max(self.min, 1)
        if self.max is not None and self.max < lo:
            raise InstanceError(f"max must be >= min ({lo})", file=file, field=f"{where}.max",
                                value=self.max)
        hi = self.max if self.max is not None else MAX_TOKENS
        return np.clip(np.rint(x), lo, hi).astype(np.int64)


class Arrivals(_Strict):
    """Arrival process of generated requests: all at 0 (offline) or Poisson at a rate."""

    process: Literal["offline", "poisson"] = "offline"
    rate_per_s: Annotated[float, Field(gt=0, le=MAX_RATE_PER_S)] | None = None


class GeneratorSpec(_Strict):
    count: Annotated[StrictInt, Field(ge=1, le=MAX_REQUESTS)]
    seed: Annotated[StrictInt, Field(ge=0)]
    input: Distribution
    output: Distribution
    arrival: Arrivals = Arrivals()


class TraceSpec(_Strict):
    trace: str = Field(min_length=1)
    format: str = "auto"
    start: Annotated[StrictInt, Field(ge=0)] = 0
    limit: Annotated[StrictInt, Field(ge=1, le=MAX_REQUESTS)] | None = None

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value != "auto" and value not in TRACE_FORMATS:
            raise ValueError("unknown trace format (one of: auto, "
                             f"{', '.join(TRACE_FORMATS)})")
        return value


class _GenerateDoc(_Strict):
    generate: GeneratorSpec


def _check_name(name: str) -> str:
    if not is_safe_name(name):
        raise ValueError(SAFE_NAME_RULE)
    return name


class _InstanceDoc(_Strict):
    name: str | None = None
    description: str | None = None
    model: str | dict[str, Any]
    system: System
    requests: Any
    solve: SolveDefaults = SolveDefaults()

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str | None) -> str | None:
        return None if value is None else _check_name(value)

    @field_validator("model", mode="before")
    @classmethod
    def _name_or_mapping(cls, value: Any) -> Any:
        if not isinstance(value, str | dict):
            raise ValueError("must be a profile name or a mapping")
        return value


@dataclass(frozen=True)
class Instance:
    """A validated instance. ``requests`` are materialised whatever their source."""

    name: str
    profile: CostProfile
    system: System
    requests: tuple[Request, ...]
    solve: SolveDefaults = field(default_factory=SolveDefaults)
    path: Path | None = None
    description: str | None = None

    @property
    def num_requests(self) -> int:
        return len(self.requests)

    @property
    def total_clients(self) -> int:
        """Client slots over all model instances."""
        return self.system.clients * self.system.instances

    @cached_property
    def ids(self) -> list[str]:
        return [r.id for r in self.requests]

    @cached_property
    def input_tokens(self) -> np.ndarray:
        return np.array([r.input_tokens for r in self.requests], dtype=np.int64)

    @cached_property
    def output_tokens(self) -> np.ndarray:
        return np.array([r.output_tokens for r in self.requests], dtype=np.int64)

    @cached_property
    def arrival_ms(self) -> np.ndarray:
        return np.array([r.arrival_ms for r in self.requests], dtype=float)

    @cached_property
    def sha256(self) -> str:
        """Content hash of the canonical dump of everything that defines the problem: the
        name, the profile, the system and every field of every request (a field added to any of
        these models changes it); not the solve defaults or the description."""
        return sha256_of({
            "name": self.name,
            "profile": self.profile.model_dump(mode="json"),
            "system": self.system.model_dump(mode="json"),
            "requests": [r.model_dump(mode="json") for r in self.requests],
        })

    def label(self) -> str:
        return str(self.path) if self.path else self.name

    def with_system(self, **changes: Any) -> Instance:
        system = self.system.model_copy(update=changes)
        return Instance(self.name, self.profile, system, self.requests, self.solve, self.path,
                        self.description)


def load_instance(path: str | Path) -> Instance:
    """Load and validate an instance file. Raises :class:`LlmoptError` naming file/field/value."""
    path = Path(path)
    data = load_yaml_mapping(path, "instance file")
    return instance_from_mapping(data, file=path)


def instance_from_mapping(data: dict[str, Any], *, file: Path | None = None,
                          base_dir: Path | None = None) -> Instance:
    base_dir = base_dir or (file.parent if file else Path.cwd())
    doc: _InstanceDoc = validated(_InstanceDoc, data, file=file, error=InstanceError)
    profile = load_profile(doc.model, base_dir=base_dir, file=file)
    requests = _materialise_requests(doc.requests, file=file, base_dir=base_dir)
    _check_requests(requests, file)
    name = doc.name or (file.stem if file else "instance")
    if not is_safe_name(name):
        raise InstanceError(f"none given, and the file's stem is unusable: it {SAFE_NAME_RULE}",
                            file=file, field="name", value=name)
    return Instance(name=name, profile=profile, system=doc.system, requests=tuple(requests),
                    solve=doc.solve, path=file, description=doc.description)


def _materialise_requests(spec: Any, *, file: Path | None, base_dir: Path) -> list[Request]:
    if isinstance(spec, list):
        if not spec:
            raise InstanceError("the request list is empty", file=file, field="requests")
        return [
            validated(Request, item, file=file, prefix=f"requests[{i}]", error=InstanceError)
            if isinstance(item, dict)
            else _not_a_mapping(item, i, file)
            for i, item in enumerate(spec)
        ]
    if isinstance(spec, dict):
        keys = {"trace", "generate"} & spec.keys()
        if len(keys) != 1:
            raise InstanceError(
                "must be a list of requests, {trace: ...} or {generate: ...}",
                file=file, field="requests", value=sorted(spec.keys()), has_value=True,
            )
        if "trace" in spec:
            tspec: TraceSpec = validated(TraceSpec, spec, file=file, prefix="requests",
                                         error=InstanceError)
            trace = base_dir / tspec.trace
            rows = read_trace(trace, tspec.format, start=tspec.start, limit=tspec.limit)
            return [validated(Request, row, file=trace, prefix=f"rows[{i}]", error=TraceError)
                    for i, row in enumerate(rows)]
        gdoc: _GenerateDoc = validated(_GenerateDoc, spec, file=file, prefix="requests",
                                       error=InstanceError)
        return generate_requests(gdoc.generate, file=file)
    raise InstanceError(
        "must be a list of requests, {trace: ...} or {generate: ...}", file=file,
        field="requests", value=spec, has_value=True,
    )


def _not_a_mapping(item: Any, i: int, file: Path | None) -> Request:
    raise InstanceError("each request must be a mapping {id, input_tokens, output_tokens}",
                        file=file, field=f"requests[{i}]", value=item, has_value=True)


def generate_requests(spec: GeneratorSpec, *, file: Path | None = None) -> list[Request]:
    """Deterministic requests for ``spec.seed``: ids r0, r1, …; lengths from the distributions;
    arrivals all 0 or Poisson."""
    rng = np.random.default_rng(spec.seed)
    f = file or Path("<generator>")
    inputs = spec.input.sample(rng, spec.count, "requests.generate.input", f)
    outputs = spec.output.sample(rng, spec.count, "requests.generate.output", f)
    if spec.arrival.process == "poisson":
        if spec.arrival.rate_per_s is None:
            raise InstanceError("required for a poisson arrival process", file=file,
                                field="requests.generate.arrival.rate_per_s")
        gaps = rng.exponential(1000.0 / spec.arrival.rate_per_s, spec.count)
        arrivals = np.concatenate([[0.0], np.cumsum(gaps[1:])])
    else:
        arrivals = np.zeros(spec.count)
    return [
        validated(Request, {"id": f"r{i}", "input_tokens": int(a), "output_tokens": int(b),
                            "arrival_ms": float(t)},
                  file=file, prefix=f"requests.generate[{i}]", error=InstanceError)
        for i, (a, b, t) in enumerate(zip(inputs, outputs, arrivals, strict=True))
    ]


def _check_requests(requests: list[Request], file: Path | None) -> None:
    if len(requests) > MAX_REQUESTS:
        raise InstanceError(f"more than {MAX_REQUESTS:,} requests", file=file, field="requests",
                            value=len(requests))
    seen: dict[str, int] = {}
    for i, r in enumerate(requests):
        if r.id in seen:
            raise InstanceError(f"duplicate request id (first at requests[{seen[r.id]}])",
                                file=file, field=f"requests[{i}].id", value=r.id)
        seen[r.id] = i


__all__ = ["Instance", "LlmoptError", "Request", "System", "generate_requests", "load_instance"]
