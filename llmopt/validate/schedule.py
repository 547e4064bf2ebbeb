"""Independent checks of timed schedules (solutions with ``segments`` and an iteration log).

Nothing here calls the engines or the models. From the instance, the segments and the iteration
log's times, :func:`check_schedule` establishes, per model instance:

- every segment names a known request, a valid phase, client and model instance, lies after its
  request's arrival, and starts and ends on iteration boundaries; iterations do not overlap;
- a client runs one request at a time; in PD competition a request stays on one client, and no
  prefill overlaps a decode;
- tokens add up: PD competition: prefill tokens = input tokens, decode tokens = output tokens;
  continuous batching: prefill + refill + decode tokens = I + O − 1 + the KVs freed by the
  request's evictions (every freed KV is recomputed), decode tokens ≤ O − 1; on the profile
  families whose predictors count O decode iterations after the prefill (``scls``: Cheng et
  al. eq 2; ``bilinear``: Huang et al. eq 16) I + O + the KVs freed, decode tokens ≤ O, and
  the first output token comes with the first decode;
- KV memory is rebuilt per iteration (a chunk adds its tokens when its iteration ends, a decode
  one per iteration, an eviction frees what its request holds, a finished request frees
  everything) and never exceeds the capacity; in PD competition the KVs *reserved* by requests
  in flight (input + output each, from the first segment to the last) never exceed it either;
- each iteration processes at most C tokens and P prompt tokens (continuous batching);
- every column of the iteration log equals what the segments give, and every iteration lasts
  what the time model gives for its composition;
- the objective is the makespan and every stated metric equals the one recomputed here:
  latency means and percentiles, queueing delay (arrival to first segment), inter-token
  latency (the gaps between a request's output tokens: the first token, the end of each of its
  decode iterations and, where a completed prefill gives the first token, of each completed
  refill), requests per second, and with SLOs the attainment and the run's goodput (requests
  meeting their SLO per second of makespan; a request within the times' rounding of a target
  may count either way). Metrics added after the first solution files were written
  (``ADDED_METRICS``) are checked when present.

It also derives the facts the claims are checked against: the makespan, and the length of the
same schedule with idle time removed (each iteration as early as its predecessor and its
requests' arrivals allow), which is a schedule too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from llmopt.data.instance import Instance
from llmopt.data.limits import block_size
from llmopt.validate.fields import is_int, is_number
from llmopt.validate.prefix import (
    block_memory,
    check_hits,
    check_total,
    prefix_truth,
    prompt_keys,
)
from llmopt.validate.scls import GIB

EPS = 2e-3  # ms: solution files carry times to the microsecond
PHASES = ("prefill", "decode", "refill", "evict", "hit")
MARKERS = ("evict", "hit")  # zero-length segments: an eviction, a prefix-cache hit
SEGMENT_FIELDS = ["request", "client", "instance", "phase", "start_ms", "end_ms", "tokens"]
LOG_COUNTS = ("batch_size", "prefill_tokens", "decode_tokens", "kv_tokens", "evictions",
              "running")
# profile families whose output tokens all come from decode iterations after the prefill
DECODE_FIRST_FAMILIES = ("scls", "bilinear")


@dataclass
class Checked:
    """What the schedule check established (valid only when it returned no reasons)."""

    makespan_ms: float = 0.0
    compact_ms: float = 0.0          # the same schedule without idle time
    iterations: pd.DataFrame = field(default_factory=pd.DataFrame)  # with composition
    requests: pd.DataFrame = field(default_factory=pd.DataFrame)    # first token, finish
    segments: pd.DataFrame = field(default_factory=pd.DataFrame)    # with iterations a..b
    first_token_from_prefill: bool = True  # continuous batching outside DECODE_FIRST_FAMILIES
    prefix_block: int = 0  # the prefix cache's block (tokens); 0: no prefix cache


def kv_capacity(instance: Instance) -> int | None:
    """M: ``system.kv_capacity``, else the profile's. For an ``scls`` profile (Cheng et al.)
    ⌊M_ava·2^30/Δ⌋ with M_ava = M_cap − M_model − M_engine (eqs 5–7, no ζ: continuous
    batching holds no padded tensors), computed here from its fields."""
    profile = instance.profile
    if instance.system.kv_capacity is None and getattr(profile, "family", None) == "scls":
        p: Any = profile
        free = p.gpu_memory_gib - p.model_memory_gib - p.engine_memory_gib
        return math.floor(free * GIB / p.kv_bytes_per_token)
    cache = getattr(profile, "kv", None)
    own = getattr(profile, "kv_capacity", None)
    return instance.system.kv_capacity or own or (cache.blocks * cache.block_size
                                                  if cache else None)


def check_schedule(instance: Instance, sol: dict[str, Any], time_model: str,
                   memory: bool = True) -> tuple[list[str], Checked | None]:
    """Reasons why the schedule in ``sol`` breaks a rule (see the module doc), and what was
    established when it breaks none. ``time_model``: ``stage``, ``replay`` (PD competition) or
    ``infermax`` (continuous batching); ``memory=False`` leaves the KV capacity unchecked (for
    hypothetical schedules that assume unlimited memory; the KV log is still checked)."""
    continuous = time_model == "infermax"
    decode_first = getattr(instance.profile, "family", None) in DECODE_FIRST_FAMILIES
    seg = segments_frame(sol, instance)
    if isinstance(seg, str):
        return [seg], None
    its_all = iterations_frame(sol.get("iterations"))
    if isinstance(its_all, str):
        return [its_all], None
    caching = continuous and instance.system.prefix_caching
    reasons = _check_requests(instance, seg, continuous, decode_first)
    if not caching and (seg["phase"] == "hit").any():
        reasons.append("prefix-cache hits (hit segments) in a schedule without a prefix cache "
                       "(system.prefix_caching)")
    reasons += _check_clients(seg, continuous)
    capacity = kv_capacity(instance) if memory else None
    keys = prompt_keys(instance, block_size(instance)) if caching else None
    row_of = {rid: k for k, rid in enumerate(instance.ids)}
    if not continuous:
        reasons += _check_no_overlap_of_phases(seg)
        reasons += _check_reserved(seg, instance, capacity)
    frames, lives = [], []
    for inst in sorted(set(seg["instance"]) | set(its_all["instance"])):
        its = its_all[its_all["instance"] == inst].sort_values("start_ms", kind="stable")
        part, problems = _indexed(seg, its, inst)
        reasons += problems
        if problems:
            continue
        comp = _composition(part, len(its))
        comp["ready"] = _ready(instance, part, len(its))
        reasons += _check_iterations(instance, its, comp, inst, continuous, time_model,
                                     None if keys is not None else capacity)
        if keys is not None:
            reasons += check_hits(instance, part, keys, row_of, inst)
            if capacity is not None and not reasons:
                reasons += _check_blocks(block_memory(part, len(its), keys, row_of),
                                         capacity // keys.block, its, inst)
        frames.append(its.assign(**{f"_{k}": v for k, v in comp.items()}))
        lives.append(part)
    if reasons:
        return reasons, None
    its = pd.concat(frames, ignore_index=True)
    indexed = pd.concat(lives)
    if keys is not None:
        reasons += check_total(instance, indexed, keys, row_of)
    requests = _request_times(instance, indexed, its, continuous and not decode_first)
    checked = Checked(makespan_ms=float(seg["end_ms"].max()), iterations=its,
                      requests=requests, compact_ms=_compact_length(its), segments=indexed,
                      first_token_from_prefill=continuous and not decode_first,
                      prefix_block=keys.block if keys is not None else 0)
    reasons += _check_objective_and_metrics(instance, sol, checked, seg)
    return reasons, checked


# ---------------------------------------------------------------------------- reading

def segments_frame(sol: dict[str, Any], instance: Instance) -> pd.DataFrame | str:
    """The segments as a DataFrame, or the reason they cannot be read."""
    segments = sol.get("segments")
    if isinstance(segments, pd.DataFrame):  # read from a schedule file
        missing = [c for c in SEGMENT_FIELDS if c not in segments]
        if missing or segments.empty:
            return f"segments are empty or lack {', '.join(missing)}"
        typed = _typed_by_column(segments[SEGMENT_FIELDS].reset_index(drop=True))
        if typed is not None:
            return _check_ranges(typed, instance)
        segments = segments[SEGMENT_FIELDS].to_dict("records")
    if not isinstance(segments, list) or not segments:
        return "segments are missing or empty"
    if not all(isinstance(s, dict) for s in segments):
        return "segments are malformed: each must be a mapping"
    seg = pd.DataFrame(segments, columns=SEGMENT_FIELDS)
    checks = (("request", lambda v: isinstance(v, str), "a request id (string)"),
              ("phase", lambda v: v in PHASES, f"one of {', '.join(PHASES)}"),
              ("client", is_int, "an integer"), ("instance", is_int, "an integer"),
              ("tokens", lambda v: is_int(v) and v >= 0, "an integer ≥ 0"),
              ("start_ms", is_number, "a finite number"), ("end_ms", is_number,
                                                           "a finite number"))
    for col, ok, what in checks:
        bad = ~seg[col].map(ok).astype(bool)
        if bad.any():
            k = int(np.flatnonzero(bad.to_numpy())[0])
            return f"segment field {col} must be {what}, found {segments[k].get(col)!r}"
    for col in ("start_ms", "end_ms"):
        seg[col] = seg[col].astype(float)
    for col in ("client", "instance", "tokens"):
        seg[col] = seg[col].astype(np.int64)
    return _check_ranges(seg, instance)


def _typed_by_column(seg: pd.DataFrame) -> pd.DataFrame | None:
    """A schedule file's segments, checked a column at a time, when every column already holds
    values of its type (integers, finite floats, known phases, string ids); else None, and the
    value-by-value check names the first bad value."""
    ints, floats = ("client", "instance", "tokens"), ("start_ms", "end_ms")
    if not all(pd.api.types.is_integer_dtype(seg[c]) and not seg[c].hasnans for c in ints):
        return None
    if not all(pd.api.types.is_float_dtype(seg[c]) or pd.api.types.is_integer_dtype(seg[c])
               for c in floats):
        return None
    if not all(np.isfinite(seg[c].to_numpy(dtype=float)).all() for c in floats):
        return None
    if not (seg["tokens"] >= 0).all() or not seg["phase"].isin(PHASES).all():
        return None
    requests = seg["request"]
    if requests.hasnans:
        return None
    if isinstance(requests.dtype, pd.CategoricalDtype):
        requests = pd.Series(requests.cat.categories)
    if not isinstance(requests.dtype, pd.StringDtype) and not all(
            isinstance(v, str) for v in requests):
        return None
    return seg.astype({"request": object, "phase": object, **dict.fromkeys(floats, float),
                       **dict.fromkeys(ints, np.int64)})


def _check_ranges(seg: pd.DataFrame, instance: Instance) -> pd.DataFrame | str:
    """Request ids, clients and instances in range, and no segment running backwards."""
    unknown = sorted(set(seg["request"]) - set(instance.ids))
    if unknown:
        return f"{len(unknown)} unknown request id(s) in segments, e.g. {unknown[:3]}"
    J, n_inst = instance.system.clients, instance.system.instances
    out = (seg["client"] < 0) | (seg["client"] >= J)
    if out.any():
        row = seg[out].iloc[0]
        return f"client {row['client']} outside 0..{J - 1} (request {row['request']})"
    if ((seg["instance"] < 0) | (seg["instance"] >= n_inst)).any():
        return f"model instance outside 0..{n_inst - 1}"
    backwards = (seg["end_ms"] < seg["start_ms"] - EPS) | (seg["start_ms"] < -EPS)
    if backwards.any():
        row = seg[backwards].iloc[0]
        return f"segment of {row['request']} ends before it starts or before time 0"
    return seg


def iterations_frame(iterations: Any) -> pd.DataFrame | str:
    """The iteration log (columns) as a DataFrame, or the reason it cannot be read."""
    if isinstance(iterations, pd.DataFrame):  # read from a schedule file
        if _numeric_by_column(iterations):
            its = iterations.reset_index(drop=True).astype(
                {"start_ms": float, "end_ms": float})
            if "phase" in its:
                its["phase"] = its["phase"].astype(object)
            return _phases_and_rows(its)
        iterations = {col: iterations[col].tolist() for col in iterations}
    if not isinstance(iterations, dict):
        return "the iteration log is missing or not a mapping of columns"
    lengths = {k: len(v) for k, v in iterations.items() if isinstance(v, list)}
    for col in ("instance", "start_ms", "end_ms"):
        if col not in lengths:
            return f"the iteration log has no column {col} (a list)"
    if len(set(lengths.values())) != 1:
        return f"the iteration log's columns differ in length: {lengths}"
    its = pd.DataFrame({k: iterations[k] for k in lengths})
    for col in ("start_ms", "end_ms"):
        if not its[col].map(is_number).all():
            return f"iteration column {col} must hold finite numbers"
        its[col] = its[col].astype(float)
    for col in ("instance", *LOG_COUNTS):
        if col in its and not its[col].map(is_int).all():
            return f"iteration column {col} must hold integers"
    return _phases_and_rows(its)


def _phases_and_rows(its: pd.DataFrame) -> pd.DataFrame | str:
    if "phase" in its and not its["phase"].isin(["prefill", "decode", "mixed"]).all():
        return "iteration column phase must hold prefill, decode or mixed"
    if its.empty:
        return "the iteration log is empty"
    return its


def _numeric_by_column(its: pd.DataFrame) -> bool:
    """A schedule file's iteration log whose columns already hold finite times and integer
    counts (checked a column at a time)."""
    if not all(c in its for c in ("instance", "start_ms", "end_ms")):
        return False
    for col in ("start_ms", "end_ms"):
        if not pd.api.types.is_numeric_dtype(its[col]) or pd.api.types.is_bool_dtype(its[col]):
            return False
        if not np.isfinite(its[col].to_numpy(dtype=float)).all():
            return False
    return all(pd.api.types.is_integer_dtype(its[col])
               for col in ("instance", *LOG_COUNTS) if col in its)


# ---------------------------------------------------------------------------- requests, clients

def _with_lives(seg: pd.DataFrame) -> pd.DataFrame:
    """Segments ordered per request in time, each with its life (evictions before it)."""
    out = seg.sort_values(["request", "start_ms", "end_ms"], kind="stable").copy()
    marker = (out["phase"] == "evict").astype(int)
    out["life"] = marker.groupby(out["request"]).cumsum() - marker
    return out


def _check_requests(instance: Instance, seg: pd.DataFrame, continuous: bool,
                    decode_first: bool = False) -> list[str]:
    reasons = []
    from_prefill = 0 if decode_first else 1  # output tokens the prefill gives (continuous)
    by_id = {r.id: r for r in instance.requests}
    missing = sorted(set(by_id) - set(seg["request"]))
    if missing:
        reasons.append(f"{len(missing)} request(s) never scheduled, e.g. {missing[:3]}")
    grouped = seg.groupby("request", sort=False)
    if not continuous:
        placements = grouped[["client", "instance"]].nunique()
        moved = placements[(placements["client"] > 1) | (placements["instance"] > 1)]
        if len(moved):
            reasons.append(f"{len(moved)} request(s) change client or instance, e.g. "
                           f"{list(moved.index[:3])}")
        if (seg["phase"].isin(["refill", "evict"])).any():
            reasons.append("PD competition has no evictions or refills")
    elif (grouped["instance"].nunique() > 1).any():
        reasons.append("a request changes model instance")
    tokens = seg.pivot_table(index="request", columns="phase", values="tokens", aggfunc="sum",
                             fill_value=0, observed=True)
    first = seg.pivot_table(index="request", columns="phase", values="start_ms", aggfunc="min",
                            observed=True)
    pre = seg[seg["phase"] == "prefill"].groupby("request")["end_ms"].min()
    start = grouped["start_ms"].min()
    ids = pd.Index(list(by_id))
    have = ids.isin(tokens.index)
    ids = ids[have]
    got = tokens.reindex(index=ids, columns=list(PHASES), fill_value=0).astype(np.int64)
    inputs, outputs = instance.input_tokens[have], instance.output_tokens[have]
    decoded = got["decode"].to_numpy()
    if continuous:  # a prefix-cache hit spares its tokens
        need = inputs + outputs - from_prefill + got["evict"].to_numpy() - got["hit"].to_numpy()
        total = (got["prefill"] + got["refill"] + got["decode"]).to_numpy()
        bad = (total != need) | (decoded > outputs - from_prefill)
    else:
        bad = (got["prefill"].to_numpy() != inputs) | (decoded != outputs)
    wrong = ids[bad].tolist()
    early = ids[start.reindex(ids).to_numpy() < instance.arrival_ms[have] - EPS].tolist()
    order: list[str] = []
    if "decode" in first.columns:
        first_decode = first["decode"].reindex(ids).to_numpy(dtype=float)
        prefill_end = pre.reindex(ids).to_numpy(dtype=float)
        out_of_order = ~np.isnan(first_decode) & (np.isnan(prefill_end)
                                                  | (first_decode < prefill_end - EPS))
        order = ids[out_of_order].tolist()
    if wrong:
        k = ids.get_loc(wrong[0])
        rid, req, row = wrong[0], by_id[wrong[0]], got.iloc[k]
        if continuous:
            wrong[0] = (f"{rid}: {int(total[k])} tokens processed ({row['decode']} decoding), "
                        f"expected {int(need[k])} with at most "
                        f"{req.output_tokens - from_prefill} decoding")
        else:
            wrong[0] = (f"{rid}: prefill {row['prefill']} vs input {req.input_tokens}, "
                        f"decode {row['decode']} vs output {req.output_tokens}")
    if wrong:
        reasons.append(f"{len(wrong)} request(s) with wrong token counts, e.g. {wrong[0]}")
    if early:
        reasons.append(f"{len(early)} request(s) start before they arrive, e.g. {early[:3]}")
    if order:
        reasons.append(f"{len(order)} request(s) decode before their prefill ends, e.g. "
                       f"{order[:3]}")
    return reasons


def _check_clients(seg: pd.DataFrame, continuous: bool) -> list[str]:
    """Per client, the spans a request occupies it (first start to last end, per life between
    evictions in continuous batching) must not overlap."""
    lived = _with_lives(seg) if continuous else seg.assign(life=0)
    spans = lived.groupby(["request", "life"], sort=False, observed=True).agg(
        instance=("instance", "first"), client=("client", "first"),
        start=("start_ms", "min"), end=("end_ms", "max")).reset_index()
    if continuous:
        same_client = lived.groupby(["request", "life"], observed=True)["client"].nunique()
        if (same_client > 1).any():
            rid = same_client[same_client > 1].index[0][0]
            return [f"request {rid} changes client without being evicted"]
    spans = spans.sort_values(["instance", "client", "start"], kind="stable")
    same = ((spans["instance"].to_numpy()[1:] == spans["instance"].to_numpy()[:-1])
            & (spans["client"].to_numpy()[1:] == spans["client"].to_numpy()[:-1]))
    overlap = same & (spans["start"].to_numpy()[1:] < spans["end"].to_numpy()[:-1] - EPS)
    if overlap.any():
        k = int(np.flatnonzero(overlap)[0])
        a, b = spans["request"].iloc[k], spans["request"].iloc[k + 1]
        return [f"client {int(spans['client'].iloc[k])} runs {a} and {b} at the same time"]
    return []


def _check_no_overlap_of_phases(seg: pd.DataFrame) -> list[str]:
    """PD competition: no prefill interval overlaps a decode interval on a model instance."""
    for inst, part in seg.groupby("instance"):
        pre = _union(part[part["phase"] == "prefill"])
        dec = _union(part[part["phase"] == "decode"])
        i = j = 0
        while i < len(pre) and j < len(dec):
            lo = max(pre[i][0], dec[j][0])
            hi = min(pre[i][1], dec[j][1])
            if hi - lo > EPS:
                return [f"instance {inst}: a prefill overlaps a decode in "
                        f"[{lo:.3f}, {hi:.3f}] ms (PD competition forbids it)"]
            if pre[i][1] < dec[j][1]:
                i += 1
            else:
                j += 1
    return []


def _union(part: pd.DataFrame) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(zip(part["start_ms"], part["end_ms"], strict=True)):
        if out and s <= out[-1][1] + EPS:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(a, b) for a, b in out]


def _check_reserved(seg: pd.DataFrame, instance: Instance, cap: int | None) -> list[str]:
    """PD competition's memory rule: the requests in flight (first segment start to last
    segment end) reserve input + output KV tokens each, never more than the capacity; a
    request that ends at t has released its KVs before one starting at t reserves them."""
    if cap is None:
        return []
    size = {r.id: r.input_tokens + r.output_tokens for r in instance.requests}
    spans = seg.groupby("request", observed=True).agg(
        instance=("instance", "first"), start=("start_ms", "min"), end=("end_ms", "max"))
    for inst, part in spans.groupby("instance"):
        events = sorted([(s, 1, size[r]) for r, s in zip(part.index, part["start"],
                                                          strict=True)]
                        + [(e, 0, -size[r]) for r, e in zip(part.index, part["end"],
                                                            strict=True)])
        held = 0
        for t, _, delta in events:
            held += delta
            if held > cap:
                return [f"instance {inst}: requests in flight reserve {held} KV tokens > "
                        f"capacity {cap} at {t:.3f} ms (PD competition reserves input + "
                        "output tokens per request)"]
    return []


# ---------------------------------------------------------------------------- iterations

def _indexed(seg: pd.DataFrame, its: pd.DataFrame, inst: int) -> tuple[pd.DataFrame, list[str]]:
    """Segments of model instance ``inst`` with the iterations they cover (a..b; an eviction
    marker at the start of iteration x gets a = x, b = x − 1), their life, and the KVs the
    request held before each segment (m0)."""
    S = its["start_ms"].to_numpy(dtype=float)
    E = its["end_ms"].to_numpy(dtype=float)
    problems = []
    if (E < S - EPS).any() or (S[1:] < E[:-1] - EPS).any():
        problems.append(f"instance {inst}: iterations overlap or end before they start")
        return seg.iloc[:0], problems
    part = _with_lives(seg[seg["instance"] == inst])
    part["a"] = np.searchsorted(S, part["start_ms"].to_numpy() - EPS, side="left")
    part["b"] = np.searchsorted(E, part["end_ms"].to_numpy() + EPS, side="right") - 1
    is_marker = part["phase"].isin(MARKERS).to_numpy()
    evict_marker = (part["phase"] == "evict").to_numpy()
    contributes = np.where(evict_marker, 0, part["tokens"].to_numpy())
    part["m0"] = (pd.Series(contributes, index=part.index)
                  .groupby([part["request"], part["life"]], observed=True).cumsum()
                  - contributes)
    R = len(S)
    a, b = part["a"].to_numpy(), part["b"].to_numpy()
    outside = (~is_marker & ((b < a) | (b >= R) | (a >= R))) | (a > R)
    if outside.any():
        return part, ["a segment lies outside the iteration log"]
    clipped_a = np.minimum(a, R - 1)
    off_grid = ~is_marker & ((np.abs(S[clipped_a] - part["start_ms"].to_numpy()) > EPS)
                             | (np.abs(E[np.maximum(b, 0)] - part["end_ms"].to_numpy()) > EPS))
    off_grid |= is_marker & (a < R) & (np.abs(S[clipped_a] - part["start_ms"].to_numpy()) > EPS)
    if off_grid.any():
        k = int(np.flatnonzero(off_grid)[0])
        problems.append(f"the segment of {part['request'].iloc[k]} at "
                        f"{part['start_ms'].iloc[k]:.3f} ms does not start and end on "
                        "iteration boundaries")
    work = part[~is_marker].sort_values(["request", "a"], kind="stable")
    same = work["request"].to_numpy()[1:] == work["request"].to_numpy()[:-1]
    twice = same & (work["a"].to_numpy()[1:] <= work["b"].to_numpy()[:-1])
    if twice.any():
        k = int(np.flatnonzero(twice)[0])
        problems.append(f"request {work['request'].iloc[k]} is in one iteration twice")
    decode = (part["phase"] == "decode").to_numpy()
    spans = b - a + 1
    bad = decode & (spans != part["tokens"].to_numpy())
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        problems.append(f"decode segment of {part['request'].iloc[k]} at "
                        f"{part['start_ms'].iloc[k]:.3f} ms has {part['tokens'].iloc[k]} tokens "
                        f"but spans {spans[k]} iterations")
    chunk = (part["phase"].isin(["prefill", "refill"])).to_numpy()
    wide = chunk & (a != b)
    if wide.any():
        k = int(np.flatnonzero(wide)[0])
        problems.append(f"the prefill/refill segment of {part['request'].iloc[k]} at "
                        f"{part['start_ms'].iloc[k]:.3f} ms spans several iterations (one "
                        f"segment per chunk expected)")
    freed_wrong = evict_marker & (part["tokens"].to_numpy() != part["m0"].to_numpy())
    if freed_wrong.any():
        k = int(np.flatnonzero(freed_wrong)[0])
        problems.append(f"eviction of {part['request'].iloc[k]} at "
                        f"{part['start_ms'].iloc[k]:.3f} ms frees {part['tokens'].iloc[k]} KVs "
                        f"but the request held {part['m0'].iloc[k]}")
    return part, problems


def _composition(part: pd.DataFrame, R: int) -> dict[str, np.ndarray]:
    """Per iteration, from the segments: tokens processed, requests decoding and the KVs they
    read, prompt tokens, Σ(c² + 2mc) and number of chunks, batch size, evictions at its start,
    requests running (holding a client: a life from its first iteration to its last, or to the
    iteration before its eviction) and KVs held at its end (chunks add their tokens, decodes
    one per iteration, each life releases all after its last iteration)."""
    a, b = part["a"].to_numpy(), part["b"].to_numpy()
    tokens = part["tokens"].to_numpy(dtype=float)
    m0 = part["m0"].to_numpy(dtype=float)
    marker = (part["phase"] == "evict").to_numpy()
    hit = (part["phase"] == "hit").to_numpy()
    decode = (part["phase"] == "decode").to_numpy()
    chunk = ~decode & ~marker & ~hit

    def ranges(mask: np.ndarray, weight: np.ndarray | float = 1.0) -> np.ndarray:
        acc = np.zeros(R + 1)
        np.add.at(acc, a[mask], weight[mask] if isinstance(weight, np.ndarray) else weight)
        np.add.at(acc, b[mask] + 1, -(weight[mask] if isinstance(weight, np.ndarray) else weight))
        return np.cumsum(acc)[:R]

    def at_b(mask: np.ndarray, weight: np.ndarray | float = 1.0) -> np.ndarray:
        acc = np.zeros(R + 1)
        np.add.at(acc, b[mask], weight[mask] if isinstance(weight, np.ndarray) else weight)
        return acc[:R]

    decoding = ranges(decode)
    # KVs read by a decode segment at its t-th iteration: m0 + t
    ramp = np.zeros(R + 3)
    np.add.at(ramp, a[decode] + 1, 1)
    np.add.at(ramp, b[decode] + 1, -(b[decode] - a[decode] + 1))
    np.add.at(ramp, b[decode] + 2, b[decode] - a[decode])
    kv_read = ranges(decode, m0) + np.cumsum(np.cumsum(ramp))[:R]
    prefill = at_b(chunk, tokens)
    keys = [part["request"].to_numpy(), part["life"].to_numpy()]
    first = pd.Series(a).groupby(keys).transform("min").to_numpy()
    last = pd.Series(b).groupby(keys).transform("max").to_numpy()
    head = pd.Series(np.arange(len(a))).groupby(keys).transform("min").to_numpy() \
        == np.arange(len(a))
    running = np.zeros(R + 1)
    np.add.at(running, first[head], 1)
    np.add.at(running, last[head] + 1, -1)
    held = np.zeros(R + 2)
    np.add.at(held, b[chunk], tokens[chunk])
    np.add.at(held, last[chunk] + 1, -tokens[chunk])
    growth = np.zeros(R + 2)
    np.add.at(growth, a[decode], 1)
    np.add.at(growth, b[decode] + 1, -1)
    np.add.at(held, last[decode] + 1, -tokens[decode])
    np.add.at(held, a[hit], tokens[hit])  # a hit's KVs are held from its first iteration
    np.add.at(held, last[hit] + 1, -tokens[hit])
    evictions = np.zeros(R + 1)
    np.add.at(evictions, np.minimum(a[marker], R), 1)
    return {"decoding": decoding, "decode_tokens": decoding, "kv_read": kv_read,
            "prefill_tokens": prefill, "tokens": prefill + decoding,
            "units": at_b(chunk, tokens ** 2 + 2 * m0 * tokens), "chunks": at_b(chunk),
            "batch_size": ranges(decode) + at_b(chunk), "evictions": evictions[:R],
            "running": np.cumsum(running)[:R],
            "kv_tokens": np.cumsum(held)[:R] + np.cumsum(np.cumsum(growth))[:R]}


def _check_blocks(blocks: np.ndarray, capacity: int, its: pd.DataFrame, inst: int
                  ) -> list[str]:
    """With a prefix cache: the KV blocks held at least (``prefix.block_memory``) within the
    capacity's ⌊M / B⌋ blocks."""
    if len(blocks) and blocks.max() > capacity:
        r = int(np.argmax(blocks))
        return [f"instance {inst}: {int(blocks[r])} KV blocks held (shared prompt blocks counted "
                f"once) exceed the capacity's {capacity} at {its['end_ms'].iloc[r]:.3f} ms"]
    return []


def _check_iterations(instance: Instance, its: pd.DataFrame, comp: dict[str, np.ndarray],
                      inst: int, continuous: bool, time_model: str, cap: int | None
                      ) -> list[str]:
    reasons = []
    kv = comp["kv_tokens"]
    if cap is not None and len(kv) and kv.max() > cap:
        r = int(np.argmax(kv))
        reasons.append(f"instance {inst}: KV {int(kv[r])} tokens exceeds capacity {cap} at "
                       f"{its['end_ms'].iloc[r]:.3f} ms")
    empty = comp["batch_size"] == 0
    if empty.any():
        r = int(np.flatnonzero(empty)[0])
        reasons.append(f"instance {inst}: the iteration at {its['start_ms'].iloc[r]:.3f} ms "
                       "processes nothing")
    for col in LOG_COUNTS:
        if col not in its:
            continue
        stated = its[col].to_numpy(dtype=np.int64)
        off = np.flatnonzero(stated != np.rint(comp[col]).astype(np.int64))
        if len(off):
            r = int(off[0])
            reasons.append(f"instance {inst}: the iteration at {its['start_ms'].iloc[r]:.3f} ms "
                           f"states {col} {stated[r]}, the segments give {int(comp[col][r])}")
    if "phase" in its:
        phase = np.where(comp["prefill_tokens"] > 0,
                         np.where(comp["decoding"] > 0, "mixed", "prefill"), "decode")
        off = np.flatnonzero(its["phase"].astype(str).to_numpy() != phase)
        if len(off):
            r = int(off[0])
            reasons.append(f"instance {inst}: the iteration at {its['start_ms'].iloc[r]:.3f} ms "
                           f"states phase {its['phase'].iloc[r]}, the segments give {phase[r]}")
    if continuous:
        C = instance.system.max_batch_tokens or getattr(instance.profile, "max_batch_tokens",
                                                        None)
        P = instance.system.max_prefill_tokens
        for limit, key, name in ((C, "tokens", "C"), (P, "prefill_tokens", "P")):
            over: np.ndarray | list[int] = (np.flatnonzero(comp[key] > limit)
                                            if limit is not None else [])
            if len(over):
                r = int(over[0])
                reasons.append(f"instance {inst}: the iteration at "
                               f"{its['start_ms'].iloc[r]:.3f} ms processes "
                               f"{int(comp[key][r])} {key.replace('_', ' ')} > {name} = {limit}")
    else:
        mixed = (comp["prefill_tokens"] > 0) & (comp["decoding"] > 0)
        if mixed.any():
            r = int(np.flatnonzero(mixed)[0])
            reasons.append(f"instance {inst}: the iteration at {its['start_ms'].iloc[r]:.3f} ms "
                           "mixes prefill and decode (PD competition forbids it)")
    expected = expected_durations(instance, comp, time_model)
    if isinstance(expected, str):
        return [*reasons, expected]
    got = (its["end_ms"] - its["start_ms"]).to_numpy(dtype=float)
    off = np.flatnonzero(np.abs(got - expected) > EPS * 2)
    if len(off):
        r = int(off[0])
        what = (f"{int(comp['prefill_tokens'][r])} prompt tokens and "
                f"{int(comp['decoding'][r])} decodes")
        family = getattr(instance.profile, "family", None)
        model = family if family in OWN_TIME_MODEL else time_model
        reasons.append(f"instance {inst}: {len(off)} iteration(s) off the {model} time "
                       f"model, e.g. the one with {what} at {its['start_ms'].iloc[r]:.3f} ms "
                       f"lasts {got[r]:.3f} ms, expected {expected[r]:.3f} ms")
    return reasons


def stage_levels(instance: Instance) -> tuple[int, int] | None:
    """(largest prefill stage, level step) of the stage model, or None without them."""
    cap = instance.system.max_prefill_tokens or getattr(instance.profile,
                                                        "max_prefill_tokens", None)
    if cap is None:
        return None
    return cap, getattr(instance.profile, "prefill_level_step", None) or cap


# profile families that time their iterations with their own model, whatever the time model
OWN_TIME_MODEL = ("roofline", "bilinear", "scls")


def expected_durations(instance: Instance, comp: dict[str, np.ndarray],
                       time_model: str) -> np.ndarray | str:
    """Iteration times by the time model, from each iteration's composition:

    - ``replay`` (PD competition): prefill overhead + per_token × prompt tokens; decode
      overhead + per_client × requests decoding;
    - ``stage`` (the original MIP): prefill = the smallest prefill level holding its tokens
      (levels every ``prefill_level_step`` up to the largest stage); decode = T_d, the round at
      the full batch J;
    - ``infermax`` (continuous batching): bias + per_token × tokens + decode_kv × KVs read by
      decodes + prefill_attention × Σ(c² + 2mc) + per_prefill_request × chunks;
    - a ``bilinear`` profile (Huang et al. 2025, eqs 14–15), whatever the time model: a prefill
      of b chunks and P prompt tokens lasts eq 14 at batch b and length P / b; d decodes
      reading K KVs last eq 15 at batch d and accumulated length (K + d) / d (the token being
      produced counted, as eq 16 counts l_i + k for the k-th output token); an iteration with
      both lasts the sum;
    - an ``scls`` profile (Cheng et al. 2024, eqs 3–4), whatever the time model: the same
      mapping with eq 3 (p1..p4, batch N = chunks, input length P / N: no padding) and eq 4
      (d1..d4, batch d, cached length (K + d) / d);
    - a ``roofline`` profile, whatever the time model: the roofline the profile's fields
      describe (``llmopt.data.cost.roofline.Roofline``, the definition of the family's model,
      built anew here) evaluated at each iteration's composition."""
    profile = instance.profile
    family = getattr(profile, "family", None)
    if family == "roofline":
        return _roofline_durations(profile, comp)
    if family == "bilinear":
        return _per_request_durations(profile, comp, ("alpha", "beta", "gamma", "delta"),
                                      "bilinear")
    if family == "scls":
        return _per_request_durations(profile, comp, ("c1", "c2", "c3", "c4"), "scls")
    if time_model == "infermax":
        need = ("bias_ms", "per_token_ms", "decode_kv_ms", "prefill_attention_ms",
                "per_prefill_request_ms")
        if not all(hasattr(profile, k) for k in need):
            return f"profile {profile.name} has no InferMax coefficients"
        p: Any = profile
        return np.where(comp["tokens"] > 0,
                        p.bias_ms + p.per_token_ms * comp["tokens"]
                        + p.decode_kv_ms * comp["kv_read"]
                        + p.prefill_attention_ms * comp["units"]
                        + p.per_prefill_request_ms * comp["chunks"], 0.0)
    pre, dec = getattr(profile, "prefill", None), getattr(profile, "decode", None)
    if (pre is None or dec is None or not hasattr(pre, "overhead_ms")
            or not hasattr(dec, "per_client_ms")):
        return f"profile {profile.name} has no PD-competition stage times"
    tokens = comp["prefill_tokens"]
    is_prefill = tokens > 0
    if time_model == "replay":
        return np.where(is_prefill, pre.overhead_ms + pre.per_token_ms * tokens,
                        dec.overhead_ms + dec.per_client_ms * comp["decoding"])
    levels = stage_levels(instance)
    if levels is None:
        return "no largest prefill stage (max_prefill_tokens) to derive levels"
    cap, step = levels
    level_cap = np.minimum(np.ceil(tokens / step) * step, cap)
    full_batch = dec.overhead_ms + dec.per_client_ms * instance.system.clients
    return np.where(is_prefill, pre.overhead_ms + pre.per_token_ms * level_cap, full_batch)


def _roofline_durations(profile: Any, comp: dict[str, np.ndarray]) -> np.ndarray:
    """Iteration times of a ``roofline`` profile: a roofline built from its fields, evaluated
    per iteration at (prompt tokens, decodes, KVs they read, Σ(c² + 2mc), chunks)."""
    estimate = profile.roofline()
    return np.array([estimate.iteration_ms(int(p), int(d), float(k), float(u), int(c))
                     for p, d, k, u, c in zip(comp["prefill_tokens"], comp["decoding"],
                                              comp["kv_read"], comp["units"], comp["chunks"],
                                              strict=True)], dtype=float)


def _per_request_durations(profile: Any, comp: dict[str, np.ndarray], names: tuple[str, ...],
                           family: str) -> np.ndarray | str:
    """Iteration times under a per-batch predictor c1·N·L + c2·N + c3·L + c4 for the prefill
    and for one decode iteration (Huang et al. eqs 14–15, coefficients ``alpha``..``delta``;
    Cheng et al. eqs 3–4, ``c1``..``c4``) mapped per request (see ``expected_durations``),
    written out from the profile's coefficients."""
    coefficients = []
    for part in ("prefill", "decode"):
        c = getattr(profile, part, None)
        values = [getattr(c, k, None) for k in names]
        if any(v is None for v in values):
            return f"profile {profile.name} has no {family} {part} coefficients"
        coefficients.append(values)
    (ap, bp, gp, dp), (ad, bd, gd, dd) = coefficients
    tokens, b = comp["prefill_tokens"], comp["chunks"]
    d, kv = comp["decoding"], comp["kv_read"]
    length = np.where(b > 0, tokens / np.maximum(b, 1), 0.0)
    prefill = np.where(b > 0, ap * b * length + bp * b + gp * length + dp, 0.0)
    accumulated = np.where(d > 0, (kv + d) / np.maximum(d, 1), 0.0)
    decode = np.where(d > 0, ad * d * accumulated + bd * d + gd * accumulated + dd, 0.0)
    return prefill + decode


# ---------------------------------------------------------------------------- derived facts

def _request_times(instance: Instance, part: pd.DataFrame, its: pd.DataFrame,
                   continuous: bool) -> pd.DataFrame:
    """Per request: arrival, first output token and finish. PD competition: the first token
    comes with the end of the request's first decode iteration; continuous batching: with the
    end of the chunk that first completes its prompt (m0 + c ≥ I)."""
    ends = {}
    for inst, group in its.groupby("instance"):
        ends[inst] = group["end_ms"].to_numpy()
    work = part[~part["phase"].isin(MARKERS)]
    size = work["request"].map({r.id: r.input_tokens for r in instance.requests})
    if continuous:
        done = work[(work["phase"] != "decode")
                    & (work["m0"] + work["tokens"] >= size.astype(float))]
        first = done.groupby("request", observed=True)["end_ms"].min()
    else:
        dec = work[work["phase"] == "decode"]
        a = dec.groupby("request", observed=True).agg(a=("a", "min"), inst=("instance", "first"))
        first = pd.Series([ends[i][k] for k, i in zip(a["a"], a["inst"], strict=True)],
                          index=a.index, dtype=float)
    finish = work.groupby("request", observed=True)["end_ms"].max()
    return pd.DataFrame({
        "request": instance.ids,
        "arrival_ms": instance.arrival_ms,
        "output_tokens": instance.output_tokens,
        "first_token_ms": first.reindex(instance.ids).to_numpy(dtype=float),
        "finish_ms": finish.reindex(instance.ids).to_numpy(dtype=float),
    })


def _ready(instance: Instance, part: pd.DataFrame, R: int) -> np.ndarray:
    """Per iteration, the latest arrival of the requests whose first segment is in it."""
    arrival = dict(zip(instance.ids, instance.arrival_ms, strict=True))
    first = part.groupby("request", observed=True)["a"].min()
    ready = np.zeros(R)
    np.maximum.at(ready, np.minimum(first.to_numpy(), R - 1),
                  first.index.map(arrival).to_numpy(dtype=float))
    return ready


def _compact_length(its: pd.DataFrame) -> float:
    """The makespan of the same schedule with idle time removed: per model instance, each
    iteration starts when the one before ends or, if later, when the requests that first
    appear in it have arrived. Every iteration keeps its composition and so its duration."""
    length = 0.0
    for _, group in its.groupby("instance"):
        group = group.sort_values("start_ms", kind="stable")
        durations = (group["end_ms"] - group["start_ms"]).to_numpy()
        t = 0.0
        for d, ready in zip(durations, group["_ready"].to_numpy(), strict=True):
            t = max(t, ready) + d
        length = max(length, t)
    return length


# ---------------------------------------------------------------------------- metrics

def recomputed_metrics(instance: Instance, checked: Checked, seg: pd.DataFrame
                       ) -> dict[str, float]:
    """The metrics of ``Schedule.metrics``, recomputed from the checked schedule."""
    req, its = checked.requests, checked.iterations
    makespan = checked.makespan_ms
    clients = instance.system.clients * instance.system.instances
    busy = float((seg["end_ms"] - seg["start_ms"]).sum())
    out: dict[str, float] = {
        "makespan_ms": makespan,
        "utilization": busy / (clients * makespan) if makespan > 0 else 0.0,
        "tokens_per_s": float(instance.output_tokens.sum()) / (makespan / 1000.0)
        if makespan > 0 else 0.0,
        "iterations": float(len(its)),
        "evictions": float(its["_evictions"].sum()),
        "running_mean": float(its["_running"].mean()),
        "batch_size_mean": float(its["_batch_size"].mean()),
        "kv_tokens_max": float(its["_kv_tokens"].max()),
    }
    multi = req["output_tokens"] > 1
    series = {
        "ttft": req["first_token_ms"] - req["arrival_ms"],
        "tpot": ((req["finish_ms"] - req["first_token_ms"])[multi]
                 / (req["output_tokens"][multi] - 1)),
        "e2e": req["finish_ms"] - req["arrival_ms"],
        "queue": _first_scheduled(checked) - req["arrival_ms"],
        "itl": pd.Series(_token_gaps(checked), dtype=float),
    }
    for name, values in series.items():
        x = values.to_numpy(dtype=float)
        if len(x) == 0:
            x = np.zeros(1)
        out[f"{name}_mean_ms"] = float(x.mean())
        for q in (50, 90, 95, 99):
            out[f"{name}_p{q}_ms"] = float(np.percentile(x, q))
    out["requests_per_s"] = (instance.num_requests / (makespan / 1000.0) if makespan > 0
                             else 0.0)
    if checked.prefix_block:
        out.update(prefix_truth(instance, checked.segments, checked.prefix_block))
    return out


#: metrics added after solution files without them were written: checked only when present
ADDED_METRICS = frozenset({
    *(f"{n}_p{q}_ms" for n in ("ttft", "tpot", "e2e") for q in (90, 95)),
    *(f"{n}_{s}_ms" for n in ("queue", "itl") for s in ("mean", "p50", "p90", "p95", "p99")),
    "requests_per_s", "goodput_rps"})


def _first_scheduled(checked: Checked) -> pd.Series:
    """Per request (the instance's order): the start of its first segment."""
    work = checked.segments[~checked.segments["phase"].isin(MARKERS)]
    first = work.groupby(work["request"].astype(str), observed=True)["start_ms"].min()
    return pd.Series(first.reindex(checked.requests["request"]).to_numpy(dtype=float),
                     index=checked.requests.index)


def _token_gaps(checked: Checked) -> np.ndarray:
    """Every gap between consecutive output tokens of each request. Tokens after the first:
    the end of each iteration a decode segment covers (a..b) and, when a completed prefill
    gives the first token, the end of the refill chunk that brings the request back to the
    most KVs it held at an eviction plus the pending token (m0 + c ≥ freed + 1)."""
    part = checked.segments
    ends = {inst: g.sort_values("start_ms")["end_ms"].to_numpy(dtype=float)
            for inst, g in checked.iterations.groupby("instance")}
    times: dict[str, list[float]] = {}
    row: Any  # pandas-stubs types each field of itertuples() as any scalar
    for row in part[part["phase"] == "decode"].itertuples(index=False):
        times.setdefault(str(row.request), []).extend(ends[row.instance][row.a:row.b + 1])
    if checked.first_token_from_prefill:
        most: dict[str, float] = {}
        # an eviction marker comes before the refill that starts when it is made
        ordered = part.assign(_refill=(part["phase"] == "refill").to_numpy()).sort_values(
            ["start_ms", "_refill"], kind="stable")
        for row in ordered.itertuples(index=False):
            name = str(row.request)
            if row.phase == "evict":
                most[name] = max(most.get(name, 0.0), float(row.tokens))
            elif (row.phase == "refill" and name in most
                  and row.m0 + row.tokens >= most[name] + 1 > row.m0):
                times.setdefault(name, []).append(float(row.end_ms))
    gaps = []
    first = dict(zip(checked.requests["request"].astype(str),
                     checked.requests["first_token_ms"].to_numpy(dtype=float), strict=True))
    for name, emitted in times.items():
        later = sorted(t for t in emitted if t > first[name] + 1e-9)
        gaps.extend(np.diff([first[name], *later]).tolist())
    return np.array(gaps, dtype=float)


def _slo_counts(instance: Instance, checked: Checked) -> tuple[int, int]:
    """Requests meeting every SLO target they have: (surely, at most), the times being
    rounded to the microsecond (a request within EPS of a target may count either way)."""
    req = checked.requests
    ttft = (req["first_token_ms"] - req["arrival_ms"]).to_numpy(dtype=float)
    e2e = (req["finish_ms"] - req["arrival_ms"]).to_numpy(dtype=float)
    outputs = req["output_tokens"].to_numpy(dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(outputs > 1, (e2e - ttft) / (outputs - 1), np.nan)
    counts = []
    for slack in (-EPS, EPS):
        met = np.ones(len(req), dtype=bool)
        for name, value in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
            target = np.array([getattr(r, f"{name}_slo_ms") for r in instance.requests],
                              dtype=float)
            met &= np.isnan(target) | np.isnan(value) | (value <= target + slack)
        counts.append(int(met.sum()))
    return counts[0], counts[1]


def _check_objective_and_metrics(instance: Instance, sol: dict[str, Any], checked: Checked,
                                 seg: pd.DataFrame) -> list[str]:
    reasons = []
    obj = sol.get("objective")
    if not is_number(obj) or abs(obj - checked.makespan_ms) > EPS:
        reasons.append(f"objective {obj!r} but the last segment ends at "
                       f"{checked.makespan_ms:.3f} ms")
    metrics = sol.get("metrics")
    if metrics is None:
        return [*reasons, "metrics are missing"]
    if not isinstance(metrics, dict):
        return [*reasons, "metrics must be a mapping of names to numbers"]
    truth = recomputed_metrics(instance, checked, seg)
    if instance.has_slos:
        surely, at_most = _slo_counts(instance, checked)
        makespan = checked.makespan_ms  # rounded to the microsecond as well
        for key, (short, long) in (
                ("attainment", (instance.num_requests, instance.num_requests)),
                ("goodput_rps", ((makespan - EPS) / 1000.0, (makespan + EPS) / 1000.0))):
            stated = metrics.get(key)
            if stated is None:
                continue
            low, high = (surely / long, at_most / short) if short > 0 else (0.0, 0.0)
            if not is_number(stated) or not low - 1e-6 <= stated <= high + 1e-6:
                reasons.append(f"metric {key} {stated!r} but the segments give "
                               f"{low:.6f}" + (f" to {high:.6f}" if high > low else ""))
    for key, stated in metrics.items():
        if key not in truth:
            continue
        value = truth[key]
        if key.endswith("_ms"):
            tol = 2 * EPS + 1e-9 * abs(value)
        elif key in ("utilization", "tokens_per_s", "requests_per_s"):
            tol = 1e-4 * max(1.0, abs(value))
        else:
            tol = 1e-6 * max(1.0, abs(value))
        if not is_number(stated) or abs(stated - value) > tol:
            reasons.append(f"metric {key} {stated!r} but the segments give {value:.6f}")
    missing = sorted(set(truth) - set(metrics) - ADDED_METRICS)
    if missing:
        reasons.append(f"metrics lack {', '.join(missing)}")
    return reasons
