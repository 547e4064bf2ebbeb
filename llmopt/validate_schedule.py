"""Independent checks of timed schedules (solutions with ``segments``).

Nothing here calls the engines. From the instance, the segments and the iteration log's times:

- every segment names a known request, a valid phase, client and model instance, and lies after
  its request's arrival;
- a client runs one request at a time; in PD competition a request stays on one client;
- tokens add up: PD competition — prefill tokens = input tokens, decode tokens = output tokens;
  continuous batching — prefill + refill + decode tokens = I + O − 1 + the KVs freed by the
  request's evictions (every freed KV is recomputed), decode tokens ≤ O − 1;
- a request's first prefill ends before its first decode;
- PD competition: on a model instance no prefill overlaps a decode in time;
- KV memory is rebuilt per iteration — a prefill/refill chunk adds its tokens when its iteration
  ends, a decode adds one per iteration, an eviction marker frees what its request holds, a
  finished request frees everything — and never exceeds the capacity; it must equal the log;
  each decode segment spans as many iterations as it has tokens; an eviction frees exactly what
  the request held;
- each iteration processes at most C tokens (continuous batching);
- ``check_timing``: every iteration lasts what the time model gives for its composition, itself
  rebuilt from the segments;
- the objective is the makespan (last segment end) and stated metrics match recomputed ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from llmopt.instance import Instance

EPS = 2e-3  # ms: solution files carry times to the microsecond
PHASES = ("prefill", "decode", "refill", "evict")
SEGMENT_FIELDS = ["request", "client", "instance", "phase", "start_ms", "end_ms", "tokens"]


def segments_frame(sol: dict[str, Any]) -> pd.DataFrame | str:
    """The segments as a DataFrame, or a reason why they cannot be read."""
    segments = sol.get("segments")
    if not isinstance(segments, list) or not segments:
        return "segments are missing or empty"
    try:
        seg = pd.DataFrame(segments, columns=SEGMENT_FIELDS)
        for col in ("start_ms", "end_ms"):
            seg[col] = seg[col].astype(float)
        for col in ("client", "instance", "tokens"):
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in seg[col]):
                return f"segment field {col} must be an integer"
    except (TypeError, ValueError) as exc:
        return f"segments are malformed: {exc}"
    return seg


def check_replay(instance: Instance, sol: dict[str, Any]) -> list[str]:
    seg = segments_frame(sol)
    if isinstance(seg, str):
        return [seg]
    reasons = _check_fields(instance, seg)
    if reasons:
        return reasons
    continuous = sol.get("mode") == "continuous"
    reasons += _check_requests(instance, seg, continuous)
    reasons += _check_clients(seg, continuous)
    if not continuous:
        reasons += _check_pd_competition(seg)
    reasons += _check_kv(instance, seg, sol.get("iterations"), continuous)
    reasons += _check_objective_and_metrics(instance, seg, sol)
    return reasons


def _check_fields(instance: Instance, seg: pd.DataFrame) -> list[str]:
    reasons = []
    unknown = sorted(set(seg["request"]) - set(instance.ids))
    if unknown:
        reasons.append(f"{len(unknown)} unknown request id(s) in segments, e.g. {unknown[:3]}")
    bad_phase = sorted(set(seg["phase"]) - set(PHASES))
    if bad_phase:
        reasons.append(f"unknown segment phase(s) {bad_phase}")
    J, n_inst = instance.system.clients, instance.system.instances
    out = (seg["client"] < 0) | (seg["client"] >= J)
    if out.any():
        row = seg[out].iloc[0]
        reasons.append(f"client {row['client']} outside 0..{J - 1} (request {row['request']})")
    if ((seg["instance"] < 0) | (seg["instance"] >= n_inst)).any():
        reasons.append(f"model instance outside 0..{n_inst - 1}")
    backwards = (seg["end_ms"] < seg["start_ms"] - EPS) | (seg["start_ms"] < -EPS)
    if backwards.any():
        row = seg[backwards].iloc[0]
        reasons.append(f"segment of {row['request']} ends before it starts or before time 0")
    if (seg["tokens"] < 0).any():
        reasons.append("negative segment tokens")
    return reasons


def _with_lives(seg: pd.DataFrame) -> pd.DataFrame:
    """Segments ordered per request in time, each with its life (evictions before it)."""
    out = seg.sort_values(["request", "start_ms", "end_ms"], kind="stable").copy()
    marker = (out["phase"] == "evict").astype(int)
    out["life"] = marker.groupby(out["request"]).cumsum() - marker
    return out


def _check_requests(instance: Instance, seg: pd.DataFrame, continuous: bool) -> list[str]:
    reasons = []
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
    elif (grouped["instance"].nunique() > 1).any():
        reasons.append("a request changes model instance")
    tokens = seg.pivot_table(index="request", columns="phase", values="tokens", aggfunc="sum",
                             fill_value=0)
    first = seg.pivot_table(index="request", columns="phase", values="start_ms", aggfunc="min")
    pre = seg[seg["phase"] == "prefill"].groupby("request")["end_ms"].min()
    start = grouped["start_ms"].min()
    wrong, early, order = [], [], []
    for rid, req in by_id.items():
        if rid not in tokens.index:
            continue
        row = tokens.loc[rid]
        got = {p: int(row.get(p, 0)) for p in PHASES}
        if continuous:
            need = req.input_tokens + req.output_tokens - 1 + got["evict"]
            total = got["prefill"] + got["refill"] + got["decode"]
            if total != need or got["decode"] > req.output_tokens - 1:
                wrong.append(f"{rid}: {total} tokens processed ({got['decode']} decoding), "
                             f"expected {need} with at most {req.output_tokens - 1} decoding")
        else:
            if got["prefill"] != req.input_tokens or got["decode"] != req.output_tokens:
                wrong.append(f"{rid}: prefill {got['prefill']} vs input {req.input_tokens}, "
                             f"decode {got['decode']} vs output {req.output_tokens}")
        if start.loc[rid] < req.arrival_ms - EPS:
            early.append(rid)
        d0 = first.loc[rid].get("decode") if "decode" in first.columns else None
        if d0 is not None and pd.notna(d0) and (rid not in pre.index or d0 < pre[rid] - EPS):
            order.append(rid)
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
    spans = lived.groupby(["request", "life"], sort=False).agg(
        instance=("instance", "first"), client=("client", "first"),
        start=("start_ms", "min"), end=("end_ms", "max")).reset_index()
    if continuous:
        same_client = lived.groupby(["request", "life"])["client"].nunique()
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


def _check_pd_competition(seg: pd.DataFrame) -> list[str]:
    """No prefill interval overlaps a decode interval on the same model instance."""
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


def kv_capacity(instance: Instance) -> float | None:
    profile = instance.profile
    kv = getattr(profile, "kv", None)
    own = getattr(profile, "kv_capacity", None)
    return instance.system.kv_capacity or own or (kv.blocks * kv.block_size if kv else None)


def indexed(seg: pd.DataFrame, its: pd.DataFrame, inst: int) -> tuple[pd.DataFrame, list[str]]:
    """Segments of model instance ``inst`` with the iterations they cover (a..b; an eviction
    marker at the start of iteration x gets a = x, b = x − 1), their life, and the KVs the
    request held before each segment (m0)."""
    S = its["start_ms"].to_numpy(dtype=float)
    E = its["end_ms"].to_numpy(dtype=float)
    part = _with_lives(seg[seg["instance"] == inst])
    part["a"] = np.searchsorted(S, part["start_ms"].to_numpy() - EPS, side="left")
    part["b"] = np.searchsorted(E, part["end_ms"].to_numpy() + EPS, side="right") - 1
    is_marker = (part["phase"] == "evict").to_numpy()
    contributes = np.where(is_marker, 0, part["tokens"].to_numpy())
    part["m0"] = (pd.Series(contributes, index=part.index)
                  .groupby([part["request"], part["life"]]).cumsum() - contributes)
    problems = []
    R = len(S)
    a, b = part["a"].to_numpy(), part["b"].to_numpy()
    outside = (~is_marker & ((b < a) | (b >= R))) | (a > R)
    if outside.any():
        problems.append("a segment lies outside the iteration log")
    decode = (part["phase"] == "decode").to_numpy()
    spans = b - a + 1
    bad = decode & (spans != part["tokens"].to_numpy()) & ~outside
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        problems.append(f"decode segment of {part['request'].iloc[k]} at "
                        f"{part['start_ms'].iloc[k]:.3f} ms has {part['tokens'].iloc[k]} tokens "
                        f"but spans {spans[k]} iterations")
    chunk = (part["phase"].isin(["prefill", "refill"])).to_numpy()
    wide = chunk & (a != b) & ~outside
    if wide.any():
        k = int(np.flatnonzero(wide)[0])
        problems.append(f"the prefill/refill segment of {part['request'].iloc[k]} at "
                        f"{part['start_ms'].iloc[k]:.3f} ms spans several iterations (one "
                        f"segment per chunk expected)")
    freed_wrong = is_marker & (part["tokens"].to_numpy() != part["m0"].to_numpy())
    if freed_wrong.any():
        k = int(np.flatnonzero(freed_wrong)[0])
        problems.append(f"eviction of {part['request'].iloc[k]} at "
                        f"{part['start_ms'].iloc[k]:.3f} ms frees {part['tokens'].iloc[k]} KVs "
                        f"but the request held {part['m0'].iloc[k]}")
    return part, problems


def rebuild_kv(part: pd.DataFrame, R: int) -> np.ndarray:
    """KV tokens held at the end of each of ``R`` iterations (see ``indexed``): chunks add
    their tokens at their iteration, decodes one per iteration, and each life releases all
    after its last iteration (the iteration before an eviction, or the last one)."""
    a, b = part["a"].to_numpy(), part["b"].to_numpy()
    tokens = part["tokens"].to_numpy(dtype=np.int64)
    marker = (part["phase"] == "evict").to_numpy()
    decode = (part["phase"] == "decode").to_numpy()
    release = (pd.Series(b).groupby([part["request"].to_numpy(), part["life"].to_numpy()])
               .transform("max").to_numpy())
    diff = np.zeros(R + 2)
    diff2 = np.zeros(R + 2)
    chunk = ~decode & ~marker
    np.add.at(diff, b[chunk], tokens[chunk])
    np.add.at(diff, release[chunk] + 1, -tokens[chunk])
    np.add.at(diff2, a[decode], 1)
    np.add.at(diff2, b[decode] + 1, -1)
    np.add.at(diff, release[decode] + 1, -tokens[decode])
    return np.cumsum(diff)[:R] + np.cumsum(np.cumsum(diff2))[:R]


def _iterations(iterations: Any) -> pd.DataFrame | str:
    try:
        its = pd.DataFrame(iterations)
        its["start_ms"] = its["start_ms"].astype(float)
        its["end_ms"] = its["end_ms"].astype(float)
        its["instance"] = its["instance"].astype(int)
    except (KeyError, TypeError, ValueError) as exc:
        return f"iterations are malformed: {exc}"
    return its


def _check_kv(instance: Instance, seg: pd.DataFrame, iterations: Any,
              continuous: bool) -> list[str]:
    cap = kv_capacity(instance)
    if iterations is None:
        if continuous:
            return ["continuous batching schedules need their iteration log to be checked"]
        return _check_kv_reserved(instance, seg, cap)
    its_all = _iterations(iterations)
    if isinstance(its_all, str):
        return [its_all]
    reasons: list[str] = []
    C = instance.system.max_batch_tokens or getattr(instance.profile, "max_batch_tokens", None)
    for inst in sorted(set(seg["instance"])):
        its = its_all[its_all["instance"] == inst].sort_values("start_ms", kind="stable")
        part, problems = indexed(seg, its, inst)
        reasons += problems
        if problems:
            continue
        kv = rebuild_kv(part, len(its))
        if cap is not None and len(kv) and kv.max() > cap:
            r = int(np.argmax(kv))
            reasons.append(f"instance {inst}: KV {int(kv[r])} tokens exceeds capacity {cap} at "
                           f"{its['end_ms'].iloc[r]:.3f} ms")
        if "kv_tokens" in its:
            stated = its["kv_tokens"].to_numpy(dtype=np.int64)
            off = np.flatnonzero(stated != kv.astype(np.int64))
            if len(off):
                r = int(off[0])
                reasons.append(f"instance {inst}: iteration at {its['start_ms'].iloc[r]:.3f} ms "
                               f"states {stated[r]} KV tokens, segments give {int(kv[r])}")
        if continuous and C is not None:
            comp = composition(part, len(its))
            over = np.flatnonzero(comp["tokens"] > C)
            if len(over):
                r = int(over[0])
                reasons.append(f"instance {inst}: the iteration at {its['start_ms'].iloc[r]:.3f} "
                               f"ms processes {int(comp['tokens'][r])} tokens > C = {C}")
    return reasons


def _check_kv_reserved(instance: Instance, seg: pd.DataFrame, cap: float | None) -> list[str]:
    """Without an iteration log (PD competition): a sufficient check, input + output tokens of
    every request in flight (first start to last end) never above the capacity."""
    if cap is None:
        return []
    size = {r.id: r.input_tokens + r.output_tokens for r in instance.requests}
    spans = seg.groupby("request").agg(instance=("instance", "first"),
                                       start=("start_ms", "min"), end=("end_ms", "max"))
    for inst, part in spans.groupby("instance"):
        events = sorted([(s, size[r]) for r, s in zip(part.index, part["start"], strict=True)]
                        + [(e - EPS, -size[r]) for r, e in zip(part.index, part["end"],
                                                               strict=True)],
                        key=lambda x: (x[0], x[1]))
        held = 0
        for t, delta in events:
            held += delta
            if held > cap:
                return [f"instance {inst}: requests in flight reserve {held} KV tokens > "
                        f"capacity {cap} at {t:.3f} ms (no iteration log to check exactly)"]
    return []


def composition(part: pd.DataFrame, R: int) -> dict[str, np.ndarray]:
    """Per iteration, from the segments: tokens processed, requests decoding and the KVs they
    read, prompt tokens prefilled, Σ(c² + 2mc) over chunks and the number of chunks."""
    a, b = part["a"].to_numpy(), part["b"].to_numpy()
    tokens = part["tokens"].to_numpy(dtype=float)
    m0 = part["m0"].to_numpy(dtype=float)
    decode = (part["phase"] == "decode").to_numpy()
    chunk = part["phase"].isin(["prefill", "refill"]).to_numpy()
    decoding = np.zeros(R + 1)
    np.add.at(decoding, a[decode], 1)
    np.add.at(decoding, b[decode] + 1, -1)
    # KVs read by a decode segment at its t-th iteration: m0 + t
    kv_const = np.zeros(R + 1)
    np.add.at(kv_const, a[decode], m0[decode])
    np.add.at(kv_const, b[decode] + 1, -m0[decode])
    ramp = np.zeros(R + 3)  # second differences of t ↦ t − a on [a, b]
    np.add.at(ramp, a[decode] + 1, 1)
    np.add.at(ramp, b[decode] + 1, -(b[decode] - a[decode] + 1))
    np.add.at(ramp, b[decode] + 2, b[decode] - a[decode])
    prefill = np.zeros(R)
    units = np.zeros(R)
    chunks = np.zeros(R)
    np.add.at(prefill, b[chunk], tokens[chunk])
    np.add.at(units, b[chunk], tokens[chunk] ** 2 + 2 * m0[chunk] * tokens[chunk])
    np.add.at(chunks, b[chunk], 1)
    dec = np.cumsum(decoding)[:R]
    kv_read = np.cumsum(kv_const)[:R] + np.cumsum(np.cumsum(ramp))[:R]
    return {"decoding": dec, "kv_read": kv_read, "prefill_tokens": prefill,
            "tokens": prefill + dec, "units": units, "chunks": chunks}


def check_timing(instance: Instance, seg: pd.DataFrame, iterations: Any, time_model: str
                 ) -> list[str]:
    """Every iteration lasts what the time model gives for its composition:

    - ``replay`` (PD competition): prefill overhead + per_token × prompt tokens; decode
      overhead + per_client × requests decoding;
    - ``stage`` (the original MIP): prefill = the smallest prefill level holding its tokens
      (levels every ``prefill_level_step`` up to the largest stage); decode = T_d, the round at
      the full batch J;
    - ``infermax`` (continuous batching): bias + per_token × tokens + decode_kv × KVs read by
      decodes + prefill_attention × Σ(c² + 2mc) + per_prefill_request × chunks."""
    if iterations is None:
        return ["no iteration log: cannot check iteration times"]
    its_all = _iterations(iterations)
    if isinstance(its_all, str):
        return [its_all]
    profile = instance.profile
    reasons: list[str] = []
    for inst in sorted(set(seg["instance"])):
        its = its_all[its_all["instance"] == inst].sort_values("start_ms", kind="stable")
        part, problems = indexed(seg, its, inst)
        if problems:
            return problems
        comp = composition(part, len(its))
        expected = _expected_durations(instance, profile, comp, time_model)
        if isinstance(expected, str):
            return [expected]
        got = (its["end_ms"] - its["start_ms"]).to_numpy(dtype=float)
        off = np.flatnonzero(np.abs(got - expected) > EPS * 2)
        if len(off):
            r = int(off[0])
            what = (f"{int(comp['prefill_tokens'][r])} prompt tokens and "
                    f"{int(comp['decoding'][r])} decodes")
            reasons.append(f"instance {inst}: {len(off)} iteration(s) off the {time_model} time "
                           f"model, e.g. the one with {what} at {its['start_ms'].iloc[r]:.3f} ms "
                           f"lasts {got[r]:.3f} ms, expected {expected[r]:.3f} ms")
    return reasons


def _expected_durations(instance: Instance, profile: Any, comp: dict[str, np.ndarray],
                        time_model: str) -> np.ndarray | str:
    if time_model == "infermax":
        need = ("bias_ms", "per_token_ms", "decode_kv_ms", "prefill_attention_ms",
                "per_prefill_request_ms")
        if not all(hasattr(profile, k) for k in need):
            return f"profile {profile.name} has no InferMax coefficients"
        return np.where(comp["tokens"] > 0,
                        profile.bias_ms + profile.per_token_ms * comp["tokens"]
                        + profile.decode_kv_ms * comp["kv_read"]
                        + profile.prefill_attention_ms * comp["units"]
                        + profile.per_prefill_request_ms * comp["chunks"], 0.0)
    pre, dec = getattr(profile, "prefill", None), getattr(profile, "decode", None)
    if pre is None or not hasattr(pre, "overhead_ms") or not hasattr(dec, "per_client_ms"):
        return f"profile {profile.name} has no PD-competition stage times"
    tokens = comp["prefill_tokens"]
    is_prefill = tokens > 0
    if time_model == "replay":
        return np.where(is_prefill, pre.overhead_ms + pre.per_token_ms * tokens,
                        dec.overhead_ms + dec.per_client_ms * comp["decoding"])
    cap = instance.system.max_prefill_tokens or getattr(profile, "max_prefill_tokens", None)
    if cap is None:
        return "no largest prefill stage (max_prefill_tokens) to derive levels"
    step = getattr(profile, "prefill_level_step", None) or cap
    level_cap = np.minimum(np.ceil(tokens / step) * step, cap)
    full_batch = dec.overhead_ms + dec.per_client_ms * instance.system.clients
    return np.where(is_prefill, pre.overhead_ms + pre.per_token_ms * level_cap, full_batch)


def _check_objective_and_metrics(instance: Instance, seg: pd.DataFrame,
                                 sol: dict[str, Any]) -> list[str]:
    reasons = []
    makespan = float(seg["end_ms"].max())
    obj = sol.get("objective")
    if not isinstance(obj, int | float) or abs(obj - makespan) > EPS:
        reasons.append(f"objective {obj} but the last segment ends at {makespan:.3f} ms")
    metrics = sol.get("metrics") or {}
    clients = instance.system.clients * instance.system.instances
    work = seg[seg["phase"] != "evict"]
    util = float((work["end_ms"] - work["start_ms"]).sum()) / (clients * makespan)
    tps = float(instance.output_tokens.sum()) / (makespan / 1000.0)
    for key, value in (("utilization", util), ("tokens_per_s", tps)):
        stated = metrics.get(key)
        if stated is not None and abs(stated - value) > 1e-4 * max(1.0, abs(value)):
            reasons.append(f"metric {key} {stated} but segments give {value:.6f}")
    return reasons
