"""The KV block cache against a model of vLLM's block pool written block by block: every block
a slot with a key and a reference count, one free queue of slots, a key map."""

from __future__ import annotations

import random

import pytest

from llmopt.sim.block_cache import BlockCache


class SlotModel:
    """Blocks as numbered slots, as vLLM's block pool keeps them."""

    def __init__(self, capacity: int) -> None:
        self.key: list[int | None] = [None] * capacity
        self.ref = [0] * capacity
        self.queue = list(range(capacity))  # head first
        self.where: dict[int, int] = {}  # key -> slot

    def hits(self, keys: list[int], limit: int) -> int:
        n = 0
        while n < limit and keys[n] in self.where:
            n += 1
        return n

    def take(self, keys: list[int]) -> list[int]:
        slots = []
        for k in keys:
            slot = self.where[k]
            if self.ref[slot] == 0:
                self.queue.remove(slot)
            self.ref[slot] += 1
            slots.append(slot)
        return slots

    def allocate(self, n: int) -> list[int] | None:
        if n > len(self.queue):
            return None
        slots, self.queue = self.queue[:n], self.queue[n:]
        for slot in slots:
            if self.key[slot] is not None:
                del self.where[self.key[slot]]
                self.key[slot] = None
            self.ref[slot] = 1
        return slots

    def commit(self, slots: list[int], keys: list[int]) -> list[int]:
        """Key the request's unkeyed ``slots`` (in order) with ``keys``; the slots keyed."""
        keyed = []
        for slot, k in zip(slots, keys, strict=True):
            if k not in self.where:
                self.key[slot], self.where[k] = k, slot
                keyed.append(slot)
        return keyed

    def release(self, keyed: list[int], unkeyed: list[int]) -> None:
        for slot in [*unkeyed, *reversed(keyed)]:
            self.ref[slot] -= 1
            if self.ref[slot] == 0:
                self.queue.append(slot)

    def cached_in_order(self) -> list[int]:
        return [self.key[s] for s in self.queue if self.key[s] is not None]  # type: ignore[misc]


def _chain(rng: random.Random, length: int) -> list[int]:
    """Keys of a prompt: a path from the root of a small trie (key = node number), so that
    prompts share prefixes often."""
    keys, node = [], 0
    for _ in range(length):
        node = node * 3 + 1 + rng.randrange(3)
        keys.append(node)
    return keys


@pytest.mark.parametrize("seed", range(300))
def test_block_cache_matches_the_slot_model(seed: int) -> None:
    rng = random.Random(seed)
    capacity = rng.randint(0, 24)
    cache, model = BlockCache(capacity, 16), SlotModel(capacity)
    running: list[dict] = []
    for _ in range(60):
        op = rng.random()
        if op < 0.5:  # a request starts: its hit, then blocks for the rest of its prompt
            keys = _chain(rng, rng.randint(1, 6))
            limit = rng.randint(0, len(keys))
            hit = cache.hits(keys, limit)
            assert hit == model.hits(keys, limit)
            need = len(keys) - hit + rng.randint(0, 2)  # and a partial or generated block or 2
            if need + cache.cached_among(keys[:hit]) > cache.free:
                continue
            cache.take(keys[:hit])
            taken = model.take(keys[:hit])
            assert cache.allocate(need)
            slots = model.allocate(need)
            assert slots is not None
            running.append({"keys": keys, "hit": hit, "held": list(keys[:hit]), "slots": slots,
                            "keyed_slots": taken, "computed": hit, "unkeyed": need})
        elif op < 0.8 and running:  # a running request computes some more prompt blocks
            r = rng.choice(running)
            more = rng.randint(0, len(r["keys"]) - r["computed"])
            keys = r["keys"][r["computed"]:r["computed"] + more]
            own = r["slots"][r["computed"] - r["hit"]:r["computed"] - r["hit"] + more]
            new = cache.commit(keys)
            keyed = model.commit(own, keys)
            assert len(new) == len(keyed)
            r["held"] += new
            r["keyed_slots"] += keyed
            r["unkeyed"] -= len(new)
            r["computed"] += more
        elif running:  # a request stops
            r = running.pop(rng.randrange(len(running)))
            cache.release(r["held"], r["unkeyed"])
            model.release(r["keyed_slots"], [s for s in r["slots"] if s not in r["keyed_slots"]])
        if rng.random() < 0.2:  # too many blocks: refused by both, nothing changes
            assert not cache.allocate(cache.free + 1)
            assert model.allocate(len(model.queue) + 1) is None
        assert cache.free == len(model.queue)
        assert list(cache.cached_in_order()) == model.cached_in_order()
        assert cache.used + cache.free == capacity


def test_a_prompt_tail_is_evicted_before_its_head() -> None:
    cache = BlockCache(4, 16)
    assert cache.allocate(4)
    assert cache.commit([10, 11, 12]) == [10, 11, 12]
    cache.release([10, 11, 12], 1)
    assert cache.free == 4 and cache.hits([10, 11, 12], 3) == 3
    assert cache.allocate(2)  # the empty block, then the prompt's last block
    assert cache.hits([10, 11, 12], 3) == 2
    assert cache.evictions == 1
