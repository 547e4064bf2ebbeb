"""Independent checks of timed schedules (solutions with ``segments``).

Rules checked, from the instance and the segment list alone (plus the iteration log's times when
the solution carries one):

- every segment names a known request, a valid phase, client and model instance, and lies in
  time after its request's arrival;
- a request stays on one client of one instance, and a client runs one request at a time;
- a request's prefill precedes its decode; its prefill tokens add up to ``input_tokens`` and its
  decode tokens to ``output_tokens``;
- PD competition: on a model instance no prefill overlaps a decode in time;
- KV memory: rebuilt per iteration (prompt tokens once prefilled, one token per decode
  iteration, released when the request finishes) and never above the capacity; with an
  iteration log, each decode segment must span exactly as many iterations as it has tokens;
- the objective is the makespan (last segment end), and stated metrics match recomputed ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from llmopt.instance import Instance

EPS = 2e-3  # ms: solution files carry times to the microsecond
PHASES = ("prefill", "decode", "refill")


def check_replay(instance: Instance, sol: dict[str, Any]) -> list[str]:
    segments = sol.get("segments")
    if not isinstance(segments, list) or not segments:
        return ["segments are missing or empty"]
    try:
        seg = pd.DataFrame(segments, columns=["request", "client", "instance", "phase",
                                              "start_ms", "end_ms", "tokens"])
        for col in ("start_ms", "end_ms"):
            seg[col] = seg[col].astype(float)
        for col in ("client", "instance", "tokens"):
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in seg[col]):
                return [f"segment field {col} must be an integer"]
    except (TypeError, ValueError) as exc:
        return [f"segments are malformed: {exc}"]
    reasons = _check_fields(instance, seg)
    if reasons:
        return reasons
    reasons += _check_requests(instance, seg)
    reasons += _check_clients(seg)
    if sol.get("mode", "pd_competition") == "pd_competition":
        reasons += _check_pd_competition(seg)
    reasons += _check_kv(instance, seg, sol.get("iterations"))
    reasons += _check_objective_and_metrics(instance, seg, sol)
    return reasons


def _check_fields(instance: Instance, seg: pd.DataFrame) -> list[str]:
    reasons = []
    ids = set(instance.ids)
    unknown = sorted(set(seg["request"]) - ids)
    if unknown:
        reasons.append(f"{len(unknown)} unknown request id(s) in segments, e.g. {unknown[:3]}")
    bad_phase = sorted(set(seg["phase"]) - set(PHASES))
    if bad_phase:
        reasons.append(f"unknown segment phase(s) {bad_phase}")
    J, n_inst = instance.system.clients, instance.system.instances
    if ((seg["client"] < 0) | (seg["client"] >= J)).any():
        row = seg[(seg["client"] < 0) | (seg["client"] >= J)].iloc[0]
        reasons.append(f"client {row['client']} outside 0..{J - 1} (request {row['request']})")
    if ((seg["instance"] < 0) | (seg["instance"] >= n_inst)).any():
        reasons.append(f"model instance outside 0..{n_inst - 1}")
    if (seg["end_ms"] < seg["start_ms"] - EPS).any() or (seg["start_ms"] < -EPS).any():
        row = seg[seg["end_ms"] < seg["start_ms"] - EPS].iloc[0] if (
            seg["end_ms"] < seg["start_ms"] - EPS).any() else seg.iloc[0]
        reasons.append(f"segment of {row['request']} ends before it starts or before time 0")
    if (seg["tokens"] < 0).any():
        reasons.append("negative segment tokens")
    return reasons


def _check_requests(instance: Instance, seg: pd.DataFrame) -> list[str]:
    reasons = []
    by_id = {r.id: r for r in instance.requests}
    missing = sorted(set(by_id) - set(seg["request"]))
    if missing:
        reasons.append(f"{len(missing)} request(s) never scheduled, e.g. {missing[:3]}")
    grouped = seg.groupby("request", sort=False)
    placements = grouped[["client", "instance"]].nunique()
    moved = placements[(placements["client"] > 1) | (placements["instance"] > 1)]
    if len(moved):
        reasons.append(f"{len(moved)} request(s) change client or instance, e.g. "
                       f"{list(moved.index[:3])}")
    tokens = seg.pivot_table(index="request", columns="phase", values="tokens", aggfunc="sum",
                             fill_value=0)
    first = seg.pivot_table(index="request", columns="phase", values="start_ms", aggfunc="min")
    last = seg.pivot_table(index="request", columns="phase", values="end_ms", aggfunc="max")
    start = grouped["start_ms"].min()
    wrong_in, wrong_out, early, order = [], [], [], []
    for rid, req in by_id.items():
        if rid not in tokens.index:
            continue
        row = tokens.loc[rid]
        if int(row.get("prefill", 0)) != req.input_tokens:
            wrong_in.append((rid, int(row.get("prefill", 0)), req.input_tokens))
        if int(row.get("decode", 0)) != req.output_tokens:
            wrong_out.append((rid, int(row.get("decode", 0)), req.output_tokens))
        if start.loc[rid] < req.arrival_ms - EPS:
            early.append(rid)
        if "decode" in first.columns and "prefill" in last.columns:
            d0, p1 = first.loc[rid].get("decode"), last.loc[rid].get("prefill")
            if pd.notna(d0) and pd.notna(p1) and d0 < p1 - EPS:
                order.append(rid)
    if wrong_in:
        rid, got, want = wrong_in[0]
        reasons.append(f"{len(wrong_in)} request(s) with prefill tokens ≠ input_tokens, e.g. "
                       f"{rid}: {got} vs {want}")
    if wrong_out:
        rid, got, want = wrong_out[0]
        reasons.append(f"{len(wrong_out)} request(s) with decode tokens ≠ output_tokens, e.g. "
                       f"{rid}: {got} vs {want}")
    if early:
        reasons.append(f"{len(early)} request(s) start before they arrive, e.g. {early[:3]}")
    if order:
        reasons.append(f"{len(order)} request(s) decode before their prefill ends, e.g. "
                       f"{order[:3]}")
    return reasons


def _check_clients(seg: pd.DataFrame) -> list[str]:
    """Per client, the requests' [first start, last end] spans must not overlap."""
    spans = seg.groupby("request", sort=False).agg(
        instance=("instance", "first"), client=("client", "first"),
        start=("start_ms", "min"), end=("end_ms", "max"))
    spans = spans.sort_values(["instance", "client", "start"], kind="stable")
    same = ((spans["instance"].to_numpy()[1:] == spans["instance"].to_numpy()[:-1])
            & (spans["client"].to_numpy()[1:] == spans["client"].to_numpy()[:-1]))
    overlap = same & (spans["start"].to_numpy()[1:] < spans["end"].to_numpy()[:-1] - EPS)
    if overlap.any():
        k = int(np.flatnonzero(overlap)[0])
        a, b = spans.index[k], spans.index[k + 1]
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
    return instance.system.kv_capacity or (kv.blocks * kv.block_size if kv else None)


def rebuild_kv(seg: pd.DataFrame, its: pd.DataFrame, inst: int
               ) -> tuple[np.ndarray, list[str]]:
    """KV tokens held at the end of each iteration of model instance ``inst``, rebuilt from the
    segments: a prefill/refill segment adds its tokens at the end of its last iteration, a
    decode segment adds one token per iteration it spans, and a request releases everything
    after the iteration in which its last segment ends."""
    S = its["start_ms"].to_numpy(dtype=float)
    E = its["end_ms"].to_numpy(dtype=float)
    R = len(S)
    part = seg[seg["instance"] == inst]
    a = np.searchsorted(S, part["start_ms"].to_numpy() - EPS, side="left")
    b = np.searchsorted(E, part["end_ms"].to_numpy() + EPS, side="right") - 1
    tokens = part["tokens"].to_numpy(dtype=np.int64)
    is_decode = (part["phase"] == "decode").to_numpy()
    problems = []
    spans = b - a + 1
    bad = is_decode & (spans != tokens)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        problems.append(f"decode segment of {part['request'].iloc[k]} at "
                        f"{part['start_ms'].iloc[k]:.3f} ms has {tokens[k]} tokens but spans "
                        f"{spans[k]} iterations")
    if ((b < a) | (b >= R) | (a < 0)).any():
        problems.append("a segment lies outside the iteration log")
        return np.zeros(R), problems
    release = pd.Series(b).groupby(part["request"].to_numpy()).transform("max").to_numpy()
    diff = np.zeros(R + 2)
    diff2 = np.zeros(R + 2)
    fixed = ~is_decode
    np.add.at(diff, b[fixed], tokens[fixed])
    np.add.at(diff, release[fixed] + 1, -tokens[fixed])
    np.add.at(diff2, a[is_decode], 1)
    np.add.at(diff2, b[is_decode] + 1, -1)
    np.add.at(diff, release[is_decode] + 1, -tokens[is_decode])
    kv = np.cumsum(diff)[:R] + np.cumsum(np.cumsum(diff2))[:R]
    return kv, problems


def _check_kv(instance: Instance, seg: pd.DataFrame, iterations: Any) -> list[str]:
    cap = kv_capacity(instance)
    if iterations is None:
        return _check_kv_reserved(instance, seg, cap)
    try:
        its_all = pd.DataFrame(iterations)
        its_all["start_ms"] = its_all["start_ms"].astype(float)
        its_all["end_ms"] = its_all["end_ms"].astype(float)
    except (KeyError, TypeError, ValueError) as exc:
        return [f"iterations are malformed: {exc}"]
    reasons: list[str] = []
    for inst in sorted(set(seg["instance"])):
        its = its_all[its_all["instance"] == inst].sort_values("start_ms", kind="stable")
        kv, problems = rebuild_kv(seg, its, inst)
        reasons += problems
        if problems:
            continue
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
    return reasons


def _check_kv_reserved(instance: Instance, seg: pd.DataFrame, cap: float | None) -> list[str]:
    """Without an iteration log: a sufficient check, input + output tokens of every request in
    flight (first start to last end) never above the capacity."""
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


def _check_objective_and_metrics(instance: Instance, seg: pd.DataFrame,
                                 sol: dict[str, Any]) -> list[str]:
    reasons = []
    makespan = float(seg["end_ms"].max())
    obj = sol.get("objective")
    if not isinstance(obj, int | float) or abs(obj - makespan) > EPS:
        reasons.append(f"objective {obj} but the last segment ends at {makespan:.3f} ms")
    metrics = sol.get("metrics") or {}
    clients = instance.system.clients * instance.system.instances
    util = float((seg["end_ms"] - seg["start_ms"]).sum()) / (clients * makespan)
    tps = float(instance.output_tokens.sum()) / (makespan / 1000.0)
    for key, value in (("utilization", util), ("tokens_per_s", tps)):
        stated = metrics.get(key)
        if stated is not None and abs(stated - value) > 1e-4 * max(1.0, abs(value)):
            reasons.append(f"metric {key} {stated} but segments give {value:.6f}")
    return reasons


def iteration_composition(seg: pd.DataFrame, its: pd.DataFrame, inst: int
                          ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per iteration of model instance ``inst``: requests decoding and prompt tokens prefilled,
    counted from the segments alone."""
    S = its["start_ms"].to_numpy(dtype=float)
    E = its["end_ms"].to_numpy(dtype=float)
    R = len(S)
    part = seg[seg["instance"] == inst]
    a = np.searchsorted(S, part["start_ms"].to_numpy() - EPS, side="left")
    b = np.searchsorted(E, part["end_ms"].to_numpy() + EPS, side="right") - 1
    problems = []
    if ((b < a) | (b >= R)).any():
        return np.zeros(R), np.zeros(R), ["a segment lies outside the iteration log"]
    decode = (part["phase"] == "decode").to_numpy()
    diff = np.zeros(R + 1)
    np.add.at(diff, a[decode], 1)
    np.add.at(diff, b[decode] + 1, -1)
    prefill = ~decode
    if (a[prefill] != b[prefill]).any():
        problems.append("a prefill segment spans several iterations (PD competition runs a "
                        "prefill stage in one iteration)")
    tokens = np.zeros(R)
    np.add.at(tokens, b[prefill], part["tokens"].to_numpy()[prefill])
    return np.cumsum(diff)[:R], tokens, problems


def check_timing(instance: Instance, seg: pd.DataFrame, iterations: Any, time_model: str
                 ) -> list[str]:
    """Every iteration lasts what the time model says for its composition (PD competition):

    - ``replay``: prefill overhead + per_token × prompt tokens; decode overhead + per_client ×
      requests decoding;
    - ``stage`` (the original MIP): prefill = time of the smallest prefill level holding its
      tokens (levels every ``prefill_level_step`` tokens up to the largest stage); decode =
      T_d, the decode round at the full batch J."""
    profile = instance.profile
    pre, dec = getattr(profile, "prefill", None), getattr(profile, "decode", None)
    if pre is None or not hasattr(pre, "overhead_ms") or not hasattr(dec, "per_client_ms"):
        return [f"profile {profile.name} has no PD-competition stage times to check"]
    if iterations is None:
        return ["no iteration log: cannot check iteration times"]
    its_all = pd.DataFrame(iterations)
    cap = instance.system.max_prefill_tokens or getattr(profile, "max_prefill_tokens", None)
    step = getattr(profile, "prefill_level_step", None) or cap
    reasons: list[str] = []
    for inst in sorted(set(seg["instance"])):
        its = its_all[its_all["instance"] == inst].sort_values("start_ms", kind="stable")
        decoding, tokens, problems = iteration_composition(seg, its, inst)
        reasons += problems
        if problems:
            continue
        is_prefill = tokens > 0
        if time_model == "replay":
            expected = np.where(is_prefill, pre.overhead_ms + pre.per_token_ms * tokens,
                                dec.overhead_ms + dec.per_client_ms * decoding)
        else:
            if cap is None:
                return ["no largest prefill stage (max_prefill_tokens) to derive levels"]
            level_cap = np.minimum(np.ceil(tokens / step) * step, cap)
            full_batch = dec.overhead_ms + dec.per_client_ms * instance.system.clients
            expected = np.where(is_prefill, pre.overhead_ms + pre.per_token_ms * level_cap,
                                full_batch)
        got = (its["end_ms"] - its["start_ms"]).to_numpy(dtype=float)
        off = np.flatnonzero(np.abs(got - expected) > EPS * 2)
        if len(off):
            r = int(off[0])
            what = (f"prefill of {int(tokens[r])} tokens" if is_prefill[r]
                    else f"decode round of {int(decoding[r])} requests")
            reasons.append(f"instance {inst}: {len(off)} iteration(s) off the {time_model} time "
                           f"model, e.g. the {what} at {its['start_ms'].iloc[r]:.3f} ms lasts "
                           f"{got[r]:.3f} ms, expected {expected[r]:.3f} ms")
    return reasons
