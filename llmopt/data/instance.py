"""Instances: a workload (requests), a serving system and a cost profile, loaded from YAML.

The YAML contract (later issues add fields; these stay stable)::

    name: gsm8k-llama65b
    model: pang-llama65b-ascend8      # profile name in models/, a path, or an inline mapping
    system: {clients: 200, kv_capacity: 131072, max_batch_tokens: 4096,
             max_prefill_tokens: 4096, instances: 1}
    requests: [...]                   # exactly one of: a list, {trace: ...}, {generate: ...}
    slo: {ttft_ms: 400, tpot_ms: 150}  # optional (llmopt.data.slo)
    solve: {problem: binpacking, solver: auto, time_limit_s: 60}

Paths are relative to the instance file. Generated requests are deterministic for a seed and get
ids ``r0, r1, …``; trace requests get ``r<row>`` with ``row`` the 0-based data row of the file.

Arrivals (``llmopt.data.arrivals``): a generator's ``arrival`` process (offline, Poisson, Gamma);
a trace's timestamps scaled by ``time_scale`` (0.5: twice as fast), or replaced by an ``arrival``
process (the only choice for length-pair tables without timestamps). ``duration_s`` keeps the
requests arriving in the first ``duration_s`` seconds (a generator then draws as many as arrive).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    StrictInt,
    field_validator,
    model_validator,
)

from llmopt.data.arrivals import Arrivals, arrival_times, count_within
from llmopt.data.cost import CostProfile, load_profile
from llmopt.data.cost.base import IterationCosts
from llmopt.data.ranges import (
    MAX_CLIENTS,
    MAX_INSTANCES,
    MAX_MS,
    MAX_REQUESTS,
    MAX_TOKENS,
)
from llmopt.data.slo import SLO_FIELDS, SloSpec, Target, resolve_slos
from llmopt.data.trace_formats import TRACE_FORMATS, read_trace
from llmopt.errors import InstanceError, LlmoptError, TraceError
from llmopt.files import (
    SAFE_NAME_RULE,
    is_safe_name,
    load_yaml_mapping,
    sha256_of,
    validated,
)

TokenCount = Annotated[StrictInt, Field(ge=1, le=MAX_TOKENS)]
SESSION_BLOCK_TOKENS = 16  # generated prompts are described in blocks of vLLM's default size
Length = Annotated[float, Field(ge=-MAX_TOKENS, le=MAX_TOKENS)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Request(_Strict):
    """One inference request: prompt length, output length, arrival time, and its SLO targets
    and class when the instance has SLOs (``llmopt.data.slo``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    input_tokens: TokenCount
    output_tokens: TokenCount
    arrival_ms: Annotated[float, Field(ge=0, le=MAX_MS)] = 0.0
    ttft_slo_ms: Target | None = None
    tpot_slo_ms: Target | None = None
    e2e_slo_ms: Target | None = None
    slo_class: str | None = Field(default=None, min_length=1)
    #: the prompt's content as block hashes (``llmopt.data.prefix``): the i-th id names tokens
    #: [i·hash_block_tokens, (i+1)·hash_block_tokens) of the prompt given every block before it
    hash_ids: tuple[Annotated[StrictInt, Field(ge=0)], ...] | None = Field(default=None,
                                                                          min_length=1)
    hash_block_tokens: Annotated[StrictInt, Field(ge=1, le=MAX_TOKENS)] | None = None

    @model_validator(mode="after")
    def _hashes_cover_the_prompt(self) -> Request:
        if (self.hash_ids is None) != (self.hash_block_tokens is None):
            raise ValueError("hash_ids and hash_block_tokens go together")
        if self.hash_ids is not None and self.hash_block_tokens is not None:
            blocks = -(-self.input_tokens // self.hash_block_tokens)
            if len(self.hash_ids) > blocks:
                raise ValueError(f"{len(self.hash_ids)} hash_ids for a prompt of "
                                 f"{self.input_tokens} tokens in blocks of "
                                 f"{self.hash_block_tokens} ({blocks} blocks at most)")
        return self


class System(_Strict):
    """The serving system: client slots (J), KV capacity (M), batch budgets (C, P), instances."""

    clients: Annotated[StrictInt, Field(ge=1, le=MAX_CLIENTS)]
    kv_capacity: TokenCount | None = None
    max_batch_tokens: TokenCount | None = None
    max_prefill_tokens: TokenCount | None = None
    instances: Annotated[StrictInt, Field(ge=1, le=MAX_INSTANCES)] = 1
    #: automatic prefix caching (vLLM V1's): KV memory in blocks of ``block_size`` tokens, a
    #: request's prefill skipping the longest cached prefix of its prompt (``llmopt.sim``)
    prefix_caching: bool = False
    #: KV block (tokens) of the prefix cache; default the profile's (``kv.block_size``), else
    #: vLLM's 16 (``llmopt.data.limits.block_size``)
    block_size: TokenCount | None = None


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


Duration = Annotated[float, Field(gt=0, le=MAX_MS / 1000)]


class PrefixSpec(_Strict):
    """Shared prompt prefixes of generated requests (``requests.generate.prefix``): shared system
    prompts and multi-turn sessions, described by block hashes (``Request.hash_ids``).

    Sessions arrive by the generator's arrival process. A session opens with one of
    ``system_prompts`` system prompts of ``system_tokens`` tokens (drawn uniformly; none when 0)
    and lasts ``turns`` turns (at most: the generator stops at ``count`` requests, and a session
    ends before a prompt would exceed ``max_prompt_tokens``). Turn t's prompt is the session so
    far (system prompt, then each earlier turn's new tokens and answer) followed by its own new
    tokens, drawn from ``input``; its answer is drawn from ``output``. Turn t + 1 arrives
    ``think_ms`` after turn t arrives (open loop: the gap does not wait for the answer)."""

    system_prompts: Annotated[StrictInt, Field(ge=0, le=MAX_REQUESTS)] = 0
    system_tokens: Annotated[StrictInt, Field(ge=1, le=MAX_TOKENS)] = 1024
    turns: Distribution = Distribution(dist="constant", value=1)
    think_ms: Distribution = Distribution(dist="constant", value=0, min=0)
    max_prompt_tokens: Annotated[StrictInt, Field(ge=1, le=MAX_TOKENS)] | None = None


class GeneratorSpec(_Strict):
    count: Annotated[StrictInt, Field(ge=1, le=MAX_REQUESTS)] | None = None
    duration_s: Duration | None = None
    seed: Annotated[StrictInt, Field(ge=0)]
    input: Distribution
    output: Distribution
    arrival: Arrivals = Arrivals()
    prefix: PrefixSpec | None = None


class TraceSpec(_Strict):
    trace: str = Field(min_length=1)
    format: str = "auto"
    start: Annotated[StrictInt, Field(ge=0)] = 0
    limit: Annotated[StrictInt, Field(ge=1, le=MAX_REQUESTS)] | None = None
    model: str | None = Field(default=None, min_length=1)      # BurstGPT's Model filter
    log_type: str | None = Field(default=None, min_length=1)   # BurstGPT's Log Type filter
    time_scale: Annotated[float, Field(gt=0, le=1e6)] = 1.0
    duration_s: Duration | None = None
    arrival: Arrivals | None = None

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
    slo: SloSpec | None = None
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
    def has_slos(self) -> bool:
        return any(getattr(r, f) is not None for r in self.requests for f in SLO_FIELDS)

    def slo_targets(self, field: str) -> np.ndarray:
        """One SLO field (``ttft_slo_ms``, ``tpot_slo_ms``, ``e2e_slo_ms``) per request, NaN
        where the request has none."""
        return np.array([np.nan if (v := getattr(r, field)) is None else v
                         for r in self.requests], dtype=float)

    def with_requests(self, requests: tuple[Request, ...]) -> Instance:
        return Instance(self.name, self.profile, self.system, requests, self.solve, self.path,
                        self.description)

    @cached_property
    def sha256(self) -> str:
        """Content hash of the canonical dump of everything that defines the problem: the
        name, the profile, the system and every field of every request, SLO targets included
        (a field added to any of these models changes it; a request field left unset is not
        dumped, so instances without SLOs keep their hash); not the solve defaults or the
        description."""
        return sha256_of({
            "name": self.name,
            "profile": self.profile.model_dump(mode="json"),
            "system": _system_dump(self.system),
            "requests": [r.model_dump(mode="json", exclude_none=True) for r in self.requests],
        })

    def label(self) -> str:
        return str(self.path) if self.path else self.name

    def with_system(self, **changes: Any) -> Instance:
        system = self.system.model_copy(update=changes)
        return Instance(self.name, self.profile, system, self.requests, self.solve, self.path,
                        self.description)


CACHE_DEFAULTS = {"prefix_caching": False, "block_size": None}


def _system_dump(system: System) -> dict[str, Any]:
    """The system's canonical dump: the prefix-cache fields only when set, so that the
    instances written before them keep their hash."""
    dump = system.model_dump(mode="json")
    for key, default in CACHE_DEFAULTS.items():
        if dump.get(key) == default:
            del dump[key]
    return dump


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
    requests = _with_slos(requests, doc.slo, profile, file)
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
            rows = _trace_arrivals(read_trace(trace, tspec.format, start=tspec.start,
                                              limit=tspec.limit, model=tspec.model,
                                              log_type=tspec.log_type,
                                              timestamps_required=False), tspec, file)
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


def _trace_arrivals(rows: list[dict[str, Any]], spec: TraceSpec, file: Path | None
                    ) -> list[dict[str, Any]]:
    """A trace's rows with their arrivals scaled by ``time_scale`` or replaced by ``arrival``,
    then cut at ``duration_s``. A table without timestamps (length pairs) arrives offline (all
    at 0 ms) unless ``arrival`` says otherwise."""
    if spec.arrival is None and rows and rows[0]["arrival_ms"] is None:
        rows = [{**row, "arrival_ms": 0.0} for row in rows]
    if spec.arrival is not None:
        _require_rate(spec.arrival, file, "requests.arrival")
        rng = np.random.default_rng(spec.arrival.seed or 0)
        times = arrival_times(spec.arrival, len(rows), rng)
        rows = [{**row, "arrival_ms": float(t)} for row, t in zip(rows, times, strict=True)]
    elif spec.time_scale != 1.0:
        rows = [{**row, "arrival_ms": row["arrival_ms"] * spec.time_scale} for row in rows]
    if spec.duration_s is not None:
        rows = [row for row in rows if row["arrival_ms"] < spec.duration_s * 1000.0]
        if not rows:
            raise InstanceError("no request arrives within it", file=file,
                                field="requests.duration_s", value=spec.duration_s)
    return rows


def _require_rate(arrivals: Arrivals, file: Path | None, where: str) -> None:
    if arrivals.needs_rate() and arrivals.rate_per_s is None:
        raise InstanceError(f"required for a {arrivals.process} arrival process", file=file,
                            field=f"{where}.rate_per_s")


def generate_requests(spec: GeneratorSpec, *, file: Path | None = None) -> list[Request]:
    """Deterministic requests for ``spec.seed``: ids r0, r1, …; lengths from the distributions;
    arrivals all 0, Poisson or Gamma. With ``duration_s`` instead of ``count``, the arrivals are
    drawn first (from their own seeded stream) and every request arriving in time is kept."""
    if (spec.count is None) == (spec.duration_s is None):
        raise InstanceError("give exactly one of count and duration_s", file=file,
                            field="requests.generate.count")
    _require_rate(spec.arrival, file, "requests.generate.arrival")
    if spec.arrival.seed is not None:
        raise InstanceError("a generator's arrivals are drawn with its own seed: set "
                            "requests.generate.seed", file=file,
                            field="requests.generate.arrival.seed", value=spec.arrival.seed)
    count = spec.count
    if spec.duration_s is not None:
        if not spec.arrival.needs_rate():
            raise InstanceError("duration_s needs a poisson or gamma arrival process",
                                file=file, field="requests.generate.duration_s",
                                value=spec.duration_s)
        count = _count_in_duration(spec.arrival, spec.duration_s, spec.seed, file)
    assert count is not None
    if spec.prefix is not None:
        if spec.duration_s is not None:
            raise InstanceError("duration_s does not go with prefix (sessions): give count",
                                file=file, field="requests.generate.duration_s",
                                value=spec.duration_s)
        return generate_sessions(spec, spec.prefix, count, file)
    rng = np.random.default_rng(spec.seed)
    f = file or Path("<generator>")
    inputs = spec.input.sample(rng, count, "requests.generate.input", f)
    outputs = spec.output.sample(rng, count, "requests.generate.output", f)
    if spec.duration_s is not None:
        arrivals = arrival_times(spec.arrival, count, np.random.default_rng([spec.seed, 1]))
    else:
        arrivals = arrival_times(spec.arrival, count, rng)
    return [
        validated(Request, {"id": f"r{i}", "input_tokens": int(a), "output_tokens": int(b),
                            "arrival_ms": float(t)},
                  file=file, prefix=f"requests.generate[{i}]", error=InstanceError)
        for i, (a, b, t) in enumerate(zip(inputs, outputs, arrivals, strict=True))
    ]


def generate_sessions(spec: GeneratorSpec, prefix: PrefixSpec, count: int,
                      file: Path | None) -> list[Request]:
    """``count`` requests of sessions and shared system prompts (``PrefixSpec``), ids r0, r1, …
    in arrival order. Every prompt is described in blocks of SESSION_BLOCK_TOKENS: a block
    wholly inside a system prompt has that prompt's id for it, any other block the session's
    id for its position (a session's tokens only ever grow at the end, so its turns share them)."""
    rng = np.random.default_rng(spec.seed)
    f = file or Path("<generator>")
    where = "requests.generate.prefix"
    sessions = arrival_times(spec.arrival, count, rng)  # at most one session per request
    turns = prefix.turns.sample(rng, count, f"{where}.turns", f)
    block = SESSION_BLOCK_TOKENS
    ids: dict[tuple[int, int, int], int] = {}  # (kind, owner, block index) -> hash id
    rows: list[tuple[float, int, int, tuple[int, ...]]] = []
    for s, start in enumerate(sessions.tolist()):
        if len(rows) >= count:
            break
        system = int(rng.integers(prefix.system_prompts)) if prefix.system_prompts else -1
        context = prefix.system_tokens if system >= 0 else 0
        arrival = start
        for _ in range(int(turns[s])):
            if len(rows) >= count:
                break
            new = int(spec.input.sample(rng, 1, "requests.generate.input", f)[0])
            answer = int(spec.output.sample(rng, 1, "requests.generate.output", f)[0])
            prompt = context + new
            if prefix.max_prompt_tokens is not None and prompt > prefix.max_prompt_tokens:
                break
            hashes = tuple(
                ids.setdefault((0, system, j) if (j + 1) * block <= (
                    prefix.system_tokens if system >= 0 else 0) else (1, s, j), len(ids))
                for j in range(-(-prompt // block)))
            rows.append((arrival, prompt, answer, hashes))
            context = prompt + answer
            gap = float(prefix.think_ms.sample(rng, 1, f"{where}.think_ms", f)[0])
            arrival += gap
    rows.sort(key=lambda row: row[0])
    return [
        validated(Request, {"id": f"r{i}", "input_tokens": prompt, "output_tokens": answer,
                            "arrival_ms": arrival, "hash_ids": hashes,
                            "hash_block_tokens": block},
                  file=file, prefix=f"requests.generate[{i}]", error=InstanceError)
        for i, (arrival, prompt, answer, hashes) in enumerate(rows)
    ]


def _count_in_duration(arrivals: Arrivals, duration_s: float, seed: int,
                       file: Path | None) -> int:
    """How many requests of the seeded arrival stream arrive before ``duration_s``."""
    assert arrivals.rate_per_s is not None
    expected = arrivals.rate_per_s * duration_s
    if expected > MAX_REQUESTS:
        raise InstanceError(f"rate x duration gives more than {MAX_REQUESTS:,} requests",
                            file=file, field="requests.generate.duration_s", value=duration_s)
    n = int(expected * 2 + 10 * arrivals.cv * np.sqrt(expected) + 10)
    while True:
        times = arrival_times(arrivals, n, np.random.default_rng([seed, 1]))
        if times[-1] >= duration_s * 1000.0 or n >= MAX_REQUESTS:
            return max(count_within(times, duration_s), 1)
        n *= 2


def _with_slos(requests: list[Request], spec: SloSpec | None, profile: CostProfile,
               file: Path | None) -> list[Request]:
    """The requests with their SLO fields resolved (``llmopt.data.slo.resolve_slos``)."""
    given = [{f: getattr(r, f) for f in (*SLO_FIELDS, "slo_class")} for r in requests]
    if spec is None and not any(v is not None for g in given for v in g.values()):
        return requests
    if not hasattr(profile, "iteration_ms") and spec is not None and spec.multiple is not None:
        raise InstanceError(f"derived SLOs need a profile that times iterations, not "
                            f"{profile.family}", file=file, field="slo.multiple")
    inputs = np.array([r.input_tokens for r in requests], dtype=float)
    outputs = np.array([r.output_tokens for r in requests], dtype=float)
    resolved = resolve_slos(spec, given, inputs, outputs, cast(IterationCosts, profile), file)
    return [r.model_copy(update=slo) for r, slo in zip(requests, resolved, strict=True)]


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
