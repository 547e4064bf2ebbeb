"""Prompt prefixes as KV blocks: which blocks of which prompts hold the same tokens.

A request may describe its prompt by block hashes (``Request.hash_ids``, as the Mooncake traces
do): the i-th id names tokens [i·H, (i+1)·H) of the prompt, H = ``hash_block_tokens``. Two
prompts share tokens [0, e) exactly when their ids agree on every block up to the one holding
token e − 1 (ids are compared as chains: an id names a block *after* the blocks before it, so
equal ids behind different prefixes are different blocks). Tokens past the last id, and prompts
without ids, share nothing.

The KV cache of a replica (vLLM's automatic prefix caching) keeps blocks of B tokens (the
system's ``block_size``): a full block of a prompt is identified by its *key*, the chain node of
the hash block holding its last token and that token's offset in it; equal keys mean equal
tokens from the prompt's start to the block's end. Keys are small integers, node · G + offset
// B with G = ⌈H / B⌉ (the most KV blocks ending in one hash block, over the requests' H): a
node sits at one depth of the trie, so its blocks' offsets differ by B, and so do their keys.
``PrefixIndex`` gives every request the keys of its full prompt blocks, exactly (a trie of the
id chains, no hashing collisions).

``ideal_reuse`` is the reuse a single replica with unlimited memory could get at best, counted
from the ids alone, independently of any simulation: each request, in arrival order, finds cached
the longest run of its leading blocks that an earlier request's prompt holds, at most its prompt
less one token (vLLM recomputes the last prompt token to get the first output token's logits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from llmopt.data.instance import Instance, Request

DEFAULT_BLOCK_SIZE = 16  # vLLM's default KV block (tokens)


class PrefixIndex:
    """The block keys of every request's prompt, for blocks of ``block_size`` tokens, computed
    when first asked (``keys``)."""

    def __init__(self, requests: Sequence[Request], block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        if block_size < 1:
            raise ValueError("block_size must be at least 1")
        self.block_size = block_size
        self.requests = requests
        self._trie: dict[tuple[int, int, int], int] = {}  # (hash tokens, parent, id) -> node
        self._chains: list[np.ndarray | None] = [None] * len(requests)
        # keys are node · G + offset // B: one G for every hash block size, so that blocks of
        # prompts hashed in different block sizes never share a key
        largest = max((r.hash_block_tokens or 1 for r in requests), default=1)
        self._per_node = -(-largest // block_size) + 1

    def chain(self, i: int) -> np.ndarray:
        """The trie node of each hash block of request ``i``'s prompt (empty without ids)."""
        nodes = self._chains[i]
        if nodes is None:
            request = self.requests[i]
            found: list[int] = []
            if request.hash_ids is not None:
                parent, trie = -1, self._trie
                for hid in request.hash_ids:
                    parent = trie.setdefault((request.hash_block_tokens or 0, parent, hid),
                                             len(trie))
                    found.append(parent)
            nodes = self._chains[i] = np.array(found, dtype=np.int64)
        return nodes

    def covered_tokens(self, i: int) -> int:
        """Prompt tokens of request ``i`` that its hash ids describe."""
        request = self.requests[i]
        return min(request.input_tokens, len(self.chain(i)) * (request.hash_block_tokens or 0))

    def keys(self, i: int) -> np.ndarray:
        """The keys of request ``i``'s full prompt blocks that its ids describe, in order:
        ``node · G + offset // B`` of each block's last token (its offset in its hash block; see
        the module doc)."""
        chain = self.chain(i)
        if not len(chain):
            return chain
        hash_tokens = self.requests[i].hash_block_tokens or 1
        B = self.block_size
        if hash_tokens % B == 0:  # every hash block holds whole KV blocks: in one broadcast
            offsets = np.arange(hash_tokens // B, dtype=np.int64)  # (k·B + B − 1) // B
            grid = chain[:, None] * self._per_node + offsets[None, :]
            return grid.ravel()[:self.covered_tokens(i) // B]
        last = np.arange(self.block_size, self.covered_tokens(i) + 1,
                         self.block_size, dtype=np.int64) - 1
        return chain[last // hash_tokens] * self._per_node + last % hash_tokens // B

    def cacheable_blocks(self, i: int) -> int:
        """Full prompt blocks of request ``i`` that a cache hit may cover: those its ids
        describe, short of its last prompt token, which is always computed."""
        prompt = self.requests[i].input_tokens
        return min(self.covered_tokens(i), prompt - 1) // self.block_size


def reusable_blocks(instance: Instance, block: int, index: PrefixIndex | None = None
                    ) -> tuple[np.ndarray, int]:
    """Per request, r_i: the leading blocks of its prompt that another request's prompt also
    holds, within those a hit may cover; and H, the blocks all first passes may skip together
    (``llmopt.problems.infermax.bounds``, ``infermax_work_cached``). Equal keys mean equal
    prefixes, so a request's shared keys are its first ones. ``index``: the instance's, for
    blocks of ``block`` tokens, when the caller has one."""
    index = index or PrefixIndex(instance.requests, block)
    n = instance.num_requests
    keys = [index.keys(i) for i in range(n)]
    cacheable = np.array([index.cacheable_blocks(i) for i in range(n)], dtype=np.int64)
    if not any(len(k) for k in keys):
        return np.zeros(n, dtype=np.int64), 0
    flat = np.concatenate(keys)
    owner = np.repeat(np.arange(n), [len(k) for k in keys])
    position = np.arange(len(flat)) - np.repeat(np.cumsum([len(k) for k in keys])
                                                - [len(k) for k in keys], [len(k) for k in keys])
    distinct, inverse, counts = np.unique(flat, return_inverse=True, return_counts=True)
    shared = counts[inverse] >= 2  # a request's keys are distinct: ≥ 2 holders
    reach = np.minimum(np.bincount(owner, weights=shared, minlength=n).astype(np.int64),
                       cacheable)
    hittable = position < cacheable[owner]
    elsewhere = np.zeros(len(distinct), dtype=bool)
    elsewhere[inverse[~hittable]] = True  # held somewhere a hit cannot cover: computed there
    only_hittable = np.zeros(len(distinct), dtype=bool)
    only_hittable[inverse[hittable]] = True
    most = int(hittable.sum()) - int((only_hittable & ~elsewhere).sum())
    return reach, most


@dataclass(frozen=True)
class Reuse:
    """Prompt tokens and blocks found cached, over all requests and per request."""

    block_size: int
    hit_blocks: np.ndarray    # per request
    prompt_tokens: np.ndarray  # per request
    total_blocks: np.ndarray   # full prompt blocks per request

    @property
    def hit_tokens(self) -> np.ndarray:
        return self.hit_blocks * self.block_size

    @property
    def token_hit_rate(self) -> float:
        """Prompt tokens found cached over all prompt tokens."""
        total = int(self.prompt_tokens.sum())
        return float(self.hit_tokens.sum()) / total if total else 0.0

    @property
    def block_hit_rate(self) -> float:
        """Full prompt blocks found cached over all full prompt blocks."""
        total = int(self.total_blocks.sum())
        return float(self.hit_blocks.sum()) / total if total else 0.0


def ideal_reuse(instance: Instance, block_size: int = DEFAULT_BLOCK_SIZE) -> Reuse:
    """The module doc's ideal: every block an earlier-arriving prompt holds is cached.

    Counted on the hash blocks, not the KV blocks: an earlier prompt holding tokens [0, e) of a
    hash block (every prompt holds a prefix of each hash block it reaches) holds every KV block
    ending by e; ``reach[node]`` is the largest such e."""
    index = PrefixIndex(instance.requests, block_size)
    reach: dict[int, int] = {}
    hits = np.zeros(instance.num_requests, dtype=np.int64)
    for i in np.argsort(instance.arrival_ms, kind="stable").tolist():
        request = instance.requests[i]
        size = request.hash_block_tokens or 0
        chain = index.chain(i).tolist()
        shared = 0
        for node in chain:
            got = reach.get(node, 0)
            shared += got
            if got < size:
                break
        hits[i] = min(shared // block_size, index.cacheable_blocks(i))
        covered = index.covered_tokens(i)
        for h, node in enumerate(chain):
            reach[node] = max(reach.get(node, 0), min(size, covered - h * size))
    return Reuse(block_size, hits, instance.input_tokens.copy(),
                 instance.input_tokens // block_size)


__all__ = ["DEFAULT_BLOCK_SIZE", "PrefixIndex", "Reuse", "ideal_reuse"]
