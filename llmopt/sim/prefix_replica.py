"""A replica with automatic prefix caching (``system.prefix_caching``), as vLLM V1 does it.

KV memory is a :class:`~llmopt.sim.block_cache.BlockCache` of ⌊M / B⌋ blocks of B tokens
(``llmopt.data.limits.block_size``); policies still read and spend memory in tokens, in block
multiples: ``free_kv()`` is the free blocks (empty or cached) times B, a running request holds
⌈max(m, m_reserve) / B⌉ blocks (its reservation is rounded up to whole blocks), blocks shared by
running requests count once, and a decode needs B (a new block) when its request's m is a
multiple of B at or past its reservation, else nothing.

A request's full prompt blocks have keys (``llmopt.data.prefix.PrefixIndex``, shared by the
replicas). When a request starts (``admit``) it finds the longest run of its leading keys present
in the cache, at most its tokens less one (vLLM recomputes the last token for its logits): it
takes those blocks, its m starts at the hit and the chunk the policy asked for covers the tokens
after it (clipped to what is left). A chunk that completes prompt blocks keys them
(``BlockCache.commit``); blocks of generated tokens and partial blocks stay unkeyed. A request
that stops (finishes or is evicted) hands its blocks back: the keyed ones stay cached until a
new block evicts them, so an evicted request's refill hits its own prompt again.

The schedule records each hit as a zero-length ``hit`` segment at the start of the iteration
the request enters (tokens: the prompt tokens found cached), and per request the tokens found at
its first admission (``cached_first``) and at every admission (``cached_total``).

Costs need nothing else: a chunk of c tokens after m cached ones costs c per-token work and
c² + 2mc attention (it reads the cached KVs), as the cost model says.

One ordering differs from vLLM: a step's decode blocks are taken after its admissions' cache
lookups (vLLM allocates the running requests' slots first), so an admission may hit a cached
block that vLLM would have handed to a decode in the same step.
"""

from __future__ import annotations

import math

import numpy as np

from llmopt.data.instance import Instance
from llmopt.data.prefix import PrefixIndex
from llmopt.errors import InternalError
from llmopt.sim.batch import Batch
from llmopt.sim.block_cache import BlockCache
from llmopt.sim.decode_stream import DecodeStream
from llmopt.sim.policy import IterationPolicy
from llmopt.sim.recorder import Recorder
from llmopt.sim.replica import Replica, RequestState

UNLIMITED_BLOCKS = 1 << 40  # the cache of a policy that ignores the KV capacity


class PrefixReplica(Replica):
    """See the module doc. ``prefix`` gives the prompts' block keys (its block size is the
    cache's); ``keys`` holds them per request while it is known to a replica (shared)."""

    def __init__(self, index: int, instance: Instance, state: RequestState,
                 policy: IterationPolicy, rank_of: list[int], by_rank: list[int],
                 fast: bool, prefix: PrefixIndex, keys: dict[int, np.ndarray]) -> None:
        super().__init__(index, instance, state, policy, rank_of, by_rank, fast)
        B = self.B = prefix.block_size
        self.kv_unit = B
        if math.isinf(self.M):
            capacity = UNLIMITED_BLOCKS
        else:
            capacity = int(self.M) // B
            self.M = capacity * B
        self.cache = BlockCache(capacity, B)
        self.prefix = prefix
        self._keys = keys
        # running request -> the keys it holds, in order (its hit, then each commit's)
        self._owned: dict[int, list[np.ndarray]] = {}
        self._stream = DecodeStream(self.m, self.S, self.gen, self.reserve_to, self.O, block=B)
        self._rec = Recorder(index, hit_phase=True)
        self._version = 0  # bumped whenever the cache changes (it dates a probe)
        self._probe: tuple[int, int, int, int] = (-1, -1, 0, 0)  # request, version, hit, cached

    # ------------------------------------------------------------------ the prompt's blocks

    def keys_of(self, i: int) -> np.ndarray:
        """The keys of request ``i``'s full prompt blocks."""
        keys = self._keys.get(i)
        if keys is None:
            keys = self._keys[i] = self.prefix.keys(i)
        return keys

    def _lookup(self, i: int) -> tuple[int, int]:
        """(blocks request ``i`` would find cached now, how many of those are not held by a
        running request): the longest present run of its leading keys, at most its tokens
        less one."""
        probe = self._probe
        if probe[0] == i and probe[1] == self._version:
            return probe[2], probe[3]
        keys = self.keys_of(i)
        limit = min(len(keys), (self.S[i] - 1) // self.B)
        hit, cached = self.cache.lookup(keys, limit) if limit > 0 else (0, 0)
        self._probe = (i, self._version, hit, cached)
        return hit, cached

    # ------------------------------------------------------------------ view

    def prefix_hit(self, i: int) -> int:
        return self._lookup(i)[0] * self.B

    def admission_kv(self, i: int, c: int) -> int:
        """Free memory admitting waiting request ``i`` with a chunk of ``c`` tokens after its
        hit takes when it reserves only those (vLLM's ``get_computed_blocks`` then
        ``allocate_slots``): the blocks of the chunk, and the hit's blocks that were cached
        rather than held."""
        hit, cached = self._lookup(i)
        B = self.B
        c = min(c, self.S[i] - hit * B)
        return (-(-(hit * B + c) // B) - hit + cached) * B

    def chunk_kv(self, i: int, c: int) -> int:
        m, B = self.m[i], self.B
        have = max(-(-m // B), self.reserve_to[i] // B)
        return max(-(-(m + c) // B) - have, 0) * B

    def _blocks(self, i: int) -> int:
        """Blocks running request ``i`` holds (its own and its share of shared ones)."""
        B = self.B
        return max(-(-self.m_of(i) // B), self.reserve_to[i] // B)

    def held_by(self, i: int) -> int:
        """Memory evicting running request ``i`` frees: its unkeyed blocks and the keyed
        ones no other running request holds."""
        owned = self._owned_keys(i)
        alone = self.cache.held_alone(owned)
        return (self._blocks(i) - len(owned) + alone) * self.B

    def _held(self) -> float:
        return self.cache.used * self.B

    def decode_needs(self, i: int) -> int:
        m = self.m_of(i)
        return self.B if m >= self.reserve_to[i] and m % self.B == 0 else 0

    def all_decode_needs(self) -> int:
        needs = self._stream.block_needs() * self.B
        for i in self._idle:
            needs += self.decode_needs(i)
        return needs

    def decode_needs_each(self) -> dict[int, int]:
        return {i: self.decode_needs(i) for i in self.decoders()}

    # ------------------------------------------------------------------ actions

    def _reserve(self, i: int, c: int, need: int, b: Batch) -> int:
        """Take request ``i``'s cache hit and allocate the rest of ``max(need, hit + c)``
        in blocks; the chunk after the hit."""
        hit, cached = self._lookup(i)
        B, cache, state = self.B, self.cache, self._state
        tokens = hit * B
        self.m[i] = tokens
        c = min(c, self.S[i] - tokens)
        blocks = -(-max(need, tokens + c) // B)
        own = blocks - hit
        spent = (own + cached) * B
        if spent > b.free:
            raise InternalError(f"{self.policy.name} admits request {self.instance.ids[i]} "
                                f"with {spent} KV tokens of blocks, {b.free:g} free")
        taken = self.keys_of(i)[:hit]
        cache.take(taken)
        if not cache.allocate(own):
            raise InternalError(f"replica {self.index}: {own} blocks for request "
                                f"{self.instance.ids[i]}, {cache.free} free")
        self._version += 1
        self._owned[i] = [taken]
        self.reserve_to[i] = blocks * B
        b.free -= spent
        state.cached_total[i] += tokens
        if state.evictions[i] == 0:
            state.cached_first[i] = tokens
        if tokens:
            self.outstanding_tokens -= tokens
            self._rec.segment(i, self.slot[i], "hit", self.t, self.t, tokens)
        return c

    def _allocate(self, chunks: list[tuple[int, int]], n_dec: int) -> None:
        B, m, reserve = self.B, self.m, self.reserve_to
        need = self._stream.block_needs() if n_dec else 0
        for i, c in chunks:
            have = max(-(-m[i] // B), reserve[i] // B)
            more = -(-(m[i] + c) // B) - have
            if more > 0:
                need += more
        self._take_blocks(need)

    def _allocate_run(self, rounds: int) -> None:
        self._take_blocks(self._stream.blocks_over(rounds))

    def _take_blocks(self, n: int) -> None:
        if n:
            if not self.cache.allocate(n):
                raise InternalError(f"{self.policy.name} runs a batch needing {n} new KV "
                                    f"blocks with {self.cache.free} free on replica "
                                    f"{self.index}")
            self._version += 1

    def _filled(self, chunks: list[tuple[int, int]]) -> None:
        """Prompt blocks the chunks completed get their keys."""
        B, m, keys = self.B, self.m, self._keys
        for i, c in chunks:
            mine = keys[i]
            hi = min(m[i] // B, len(mine))
            lo = (m[i] - c) // B
            if hi > lo:
                self._owned[i].append(self.cache.commit_array(mine[lo:hi]))
                self._version += 1

    def _rounds_in_memory(self, rounds: float) -> float:
        stream = self._stream
        if not stream.grow_count or math.isinf(self.M):
            return rounds
        return min(rounds, stream.rounds_within(self.cache.free))

    def _owned_keys(self, i: int) -> np.ndarray:
        parts = self._owned[i]
        if len(parts) > 1:
            parts[:] = [np.concatenate(parts)]
        return parts[0]

    def _stop(self, i: int) -> None:
        owned = self._owned_keys(i)
        del self._owned[i]
        self.cache.release(owned, self._blocks(i) - len(owned))
        self._version += 1
        super()._stop(i)

    def check_drained(self) -> None:
        """After the run: every block handed back (a leak is a bug of this module)."""
        if self.cache.used or self._owned:
            raise InternalError(f"replica {self.index}: {self.cache.used} KV blocks still held "
                                f"after the run ({len(self._owned)} requests)")

    def _finish(self, i: int) -> None:
        super()._finish(i)
        self._keys.pop(i, None)


__all__ = ["PrefixReplica"]
