"""Independent checks of a schedule's prefix-cache hits (``system.prefix_caching``).

A hit is a zero-length ``hit`` segment at the start of the iteration in which a request (re)enters
a replica, its tokens the prompt tokens it did not compute. From the instance's hash ids alone
(each prompt's full KV blocks of B tokens get keys: equal keys, equal tokens from the prompt's
start to the block's end; computed here, not by the simulator's index) and the segments:

- a hit is a whole number of blocks, opens its life (nothing before it in the life) and the
  life's first chunk starts in the same iteration; at a first admission it covers at most the
  prompt's full blocks short of its last token, at a readmission at most its full blocks;
- its last block (so every block before it: equal keys, equal prefixes) was computed on the same
  replica, by a chunk that ended no later than the hit: a cache holds only what was computed;
- the first admissions' hits total at most the order-free maximum: every key is computed at least
  once before anyone hits it, unless some prompt holds it where it cannot be hit (its last
  token);
- KV memory in blocks, a lower bound per iteration: every running life holds ⌈m / B⌉ blocks, of
  which its completed prompt blocks are keyed; a keyed block held by several lives counts once
  (the memory really used is at least this: a policy may reserve more, or compute a block twice).

The prefix metrics are recomputed from the hit segments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from llmopt.data.instance import Instance

EPS = 2e-3  # ms, as the schedule check


@dataclass(frozen=True)
class PromptKeys:
    """Every prompt's full-block keys, concatenated (request i's are
    ``keys[start[i]:start[i + 1]]``), and how many of them a first admission may hit."""

    block: int
    keys: np.ndarray
    start: np.ndarray
    cacheable: np.ndarray

    @property
    def count(self) -> np.ndarray:
        return np.diff(self.start)


def prompt_keys(instance: Instance, block: int) -> PromptKeys:
    """Keys of each prompt's full blocks: the chain of hash ids up to the hash block holding the
    block's last token, and that token's offset in it (a dictionary of chains: no collisions)."""
    scale = max((r.hash_block_tokens or 1 for r in instance.requests), default=1)
    chains: dict[tuple[int, int, int], int] = {}
    parts, counts, cacheable = [], [], []
    for r in instance.requests:
        if r.hash_ids is None or r.hash_block_tokens is None:
            parts.append(np.zeros(0, dtype=np.int64))
            counts.append(0)
            cacheable.append(0)
            continue
        size, node = r.hash_block_tokens, -1
        nodes = []
        for hid in r.hash_ids:
            node = chains.setdefault((size, node, hid), len(chains))
            nodes.append(node)
        covered = min(r.input_tokens, len(nodes) * size)
        last = np.arange(block - 1, covered, block, dtype=np.int64)
        parts.append(np.asarray(nodes, dtype=np.int64)[last // size] * scale + last % size)
        counts.append(len(last))
        cacheable.append(min(covered, r.input_tokens - 1) // block)
    start = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=start[1:])
    keys = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return PromptKeys(block, keys, start, np.asarray(cacheable, dtype=np.int64))


def _expand(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, j) for every row and every j in [lo, hi) of it (empty ranges skipped)."""
    n = np.maximum(hi - lo, 0)
    rows = np.repeat(np.arange(len(n)), n)
    j = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n) + np.repeat(lo, n)
    return rows, j


def check_hits(instance: Instance, part: pd.DataFrame, pk: PromptKeys,
               row_of: dict[str, int], inst: int) -> list[str]:
    """The hit rules of the module doc for the segments of one replica (``part``: with a, b,
    life and m0, as the schedule check indexes them)."""
    B = pk.block
    hit = part[(part["phase"] == "hit").to_numpy()]
    if hit.empty:
        return []
    reasons = []
    rows = hit["request"].astype(str).map(row_of).to_numpy(dtype=np.int64)
    tokens = hit["tokens"].to_numpy(dtype=np.int64)
    life = hit["life"].to_numpy(dtype=np.int64)
    blocks = tokens // B
    cap = np.where(life == 0, pk.cacheable[rows], pk.count[rows])

    def first_bad(mask: np.ndarray, why: str) -> None:
        if mask.any():
            k = int(np.flatnonzero(mask)[0])
            reasons.append(f"instance {inst}: {int(mask.sum())} prefix-cache hit(s) {why}, "
                           f"e.g. {hit['request'].iloc[k]} ({tokens[k]} tokens at "
                           f"{hit['start_ms'].iloc[k]:.3f} ms)")

    first_bad((tokens <= 0) | (tokens % B != 0), f"not a positive multiple of the block ({B})")
    first_bad(blocks > cap, "longer than the prompt blocks a hit may cover")
    first_bad(hit["m0"].to_numpy() != 0, "not at the start of the request's life")
    chunks = part[part["phase"].isin(["prefill", "refill"]).to_numpy()]
    opened = hit.merge(chunks[["request", "life", "a"]].drop_duplicates(),
                       on=["request", "life", "a"], how="left", indicator=True)
    first_bad((opened["_merge"] == "left_only").to_numpy(),
              "without a chunk of the request in the same iteration")
    if reasons:
        return reasons
    # when each block was first computed on this replica: chunks (m0, m0 + c] complete the
    # prompt blocks j with m0 < (j + 1)·B <= m0 + c
    c_rows = chunks["request"].astype(str).map(row_of).to_numpy(dtype=np.int64)
    m0 = chunks["m0"].to_numpy(dtype=np.int64)
    done = m0 + chunks["tokens"].to_numpy(dtype=np.int64)
    which, j = _expand(m0 // B, np.minimum(done // B, pk.count[c_rows]))
    computed = pd.Series(chunks["end_ms"].to_numpy(dtype=float)[which]).groupby(
        pk.keys[pk.start[c_rows[which]] + j]).min()
    last_key = pk.keys[pk.start[rows] + blocks - 1]
    when = computed.reindex(last_key).to_numpy(dtype=float)
    first_bad(~(when <= hit["start_ms"].to_numpy(dtype=float) + EPS),
              "of blocks no chunk on this replica computed before")
    return reasons


def check_total(instance: Instance, seg: pd.DataFrame, pk: PromptKeys,
                row_of: dict[str, int]) -> list[str]:
    """The first admissions' hits against the order-free maximum (module doc)."""
    hit = seg[(seg["phase"] == "hit").to_numpy() & (seg["life"] == 0).to_numpy()]
    total = int(hit["tokens"].sum()) // pk.block
    n = len(pk.cacheable)
    owner = np.repeat(np.arange(n), pk.count)
    index = np.arange(len(pk.keys)) - pk.start[owner]
    hittable = index < pk.cacheable[owner]
    keys = pk.keys[hittable]
    distinct_hittable = np.unique(keys)
    anywhere_else = np.isin(distinct_hittable, pk.keys[~hittable])
    most = len(keys) - int((~anywhere_else).sum())
    if total > most:
        return [f"the first admissions' prefix-cache hits total {total} blocks, more than the "
                f"{most} the prompts allow (each block is computed once before it is hit)"]
    return []


def block_memory(part: pd.DataFrame, R: int, pk: PromptKeys,
                 row_of: dict[str, int]) -> np.ndarray:
    """Per iteration of one replica, the KV blocks its running lives hold at least (module
    doc): Σ ⌈m / B⌉ − their keyed blocks + the distinct keyed blocks."""
    B = pk.block
    a, b = part["a"].to_numpy(), part["b"].to_numpy()
    m0 = part["m0"].to_numpy(dtype=np.int64)
    tokens = part["tokens"].to_numpy(dtype=np.int64)
    phase = part["phase"].astype(str).to_numpy()
    keys = [part["request"].to_numpy(), part["life"].to_numpy()]
    last = pd.Series(b).groupby(keys).transform("max").to_numpy()
    rows = part["request"].astype(str).map(row_of).to_numpy(dtype=np.int64)
    blocks = np.zeros(R + 2, dtype=np.int64)
    # chunks and hits: ⌈m/B⌉ grows when they complete (chunks at b, hits at a), and a life's
    # blocks are released after its last iteration
    for mask, at in (((phase == "prefill") | (phase == "refill"), b), (phase == "hit", a)):
        grow = -(-(m0 + tokens) // B) - (-(-m0 // B))
        np.add.at(blocks, at[mask], grow[mask])
        np.add.at(blocks, last[mask] + 1, -grow[mask])
    # decodes: the iteration of the k-th token (k = 1..tokens) adds a block when m0 + k − 1 is
    # a multiple of B
    dec = np.flatnonzero(phase == "decode")
    first_k = (-m0[dec]) % B + 1
    which, k = _expand(np.zeros(len(dec), dtype=np.int64),
                       np.maximum((tokens[dec] - first_k) // B + 1, 0))
    at = a[dec][which] + first_k[which] - 1 + k * B
    np.add.at(blocks, at, 1)
    np.add.at(blocks, last[dec][which] + 1, -1)
    # keyed blocks: key j of a life from when it is complete (chunk's b; hit's a) to the end
    starts_, lives_, keys_ = [], [], []
    for mask, at_ in (((phase == "prefill") | (phase == "refill"), b), (phase == "hit", a)):
        idx = np.flatnonzero(mask)
        lo = m0[idx] // B
        hi = np.minimum((m0[idx] + tokens[idx]) // B, pk.count[rows[idx]])
        which, j = _expand(lo, hi)
        starts_.append(at_[idx][which])
        lives_.append(last[idx][which])
        keys_.append(pk.keys[pk.start[rows[idx][which]] + j])
    start, end, key = (np.concatenate(x) for x in (starts_, lives_, keys_))
    np.add.at(blocks, start, -1)
    np.add.at(blocks, end + 1, 1)
    # the distinct ones: the union of each key's intervals
    order = np.lexsort((start, key))
    start, end, key = start[order], end[order], key[order]
    new_key = np.ones(len(key), dtype=bool)
    new_key[1:] = key[1:] != key[:-1]
    group = np.cumsum(new_key) - 1
    span = R + 2
    reach = np.maximum.accumulate(group * span + end) - group * span  # max end so far in key
    before = np.empty_like(reach)
    if len(reach):
        before[0] = -1
        before[1:] = reach[:-1]
    before[new_key] = -1
    begin = np.maximum(start, before + 1)
    counted = begin <= end
    np.add.at(blocks, begin[counted], 1)
    np.add.at(blocks, end[counted] + 1, -1)
    return np.cumsum(blocks)[:R]


def prefix_truth(instance: Instance, seg: pd.DataFrame, block: int) -> dict[str, float]:
    """The prefix metrics of ``Schedule.metrics`` from the hit segments (with their life)."""
    hit = seg[(seg["phase"] == "hit").to_numpy()]
    first = hit[(hit["life"] == 0).to_numpy()]
    first_tokens = first["tokens"].to_numpy(dtype=np.int64)
    prompts = instance.input_tokens.astype(np.int64)
    blocks = int((prompts // block).sum())
    return {
        "prefix_hit_rate_tokens": float(first_tokens.sum() / prompts.sum()),
        "prefix_hit_rate_blocks": float((first_tokens // block).sum() / blocks) if blocks
        else 0.0,
        "prefill_tokens_saved": float(hit["tokens"].sum()),
    }


__all__ = ["PromptKeys", "block_memory", "check_hits", "check_total", "prefix_truth",
           "prompt_keys"]
