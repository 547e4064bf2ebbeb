"""One replica's KV memory in blocks, with automatic prefix caching as vLLM V1 does it.

Memory is ``capacity`` blocks of ``block_size`` tokens. A full block of a prompt has a *key*
(``llmopt.data.prefix``: equal keys, equal tokens from the prompt's start to the block's end).
A block is, at any time, one of:

- *held*: by one or more running requests. A keyed block is held once however many requests
  share it (its reference count); a block without a key (a partial block, a block of generated
  tokens, or a prompt block whose key another block already carries) belongs to one request;
- *cached*: keyed and held by none, kept with its content in least-recently-freed order (vLLM's
  free block queue): a request whose prompt starts with it takes it back instead of recomputing;
- *empty*.

Blocks held by none (cached or empty) wait in one queue, vLLM's free block queue: all empty
at first; a request that stops appends its blocks to the tail, last block first (its generated
and partial blocks, then its prompt blocks from the last to the first), so that the tail of a
prompt goes before its head; a new block is taken from the head, evicting the cached content it
held. A block taken back by a hit leaves the queue wherever it is. Only the blocks a request
computes itself are keyed, when their last token is computed; a key already present leaves the
new block unkeyed (vLLM would keep both; a lookup finds the first either way).

Keys are small non-negative integers (``PrefixIndex.keys``: dense), so the cache's state is
numpy arrays indexed by key, and a request's blocks move in one vectorised step: where each key
is (absent, held, or the queue run holding it) and how many requests beyond the first hold it.
The queue is kept as runs, one per release (its keyed blocks in queue order) or of empty blocks;
a block taken back by a hit leaves a stale entry in its run, skipped when the run reaches the
head.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence

import numpy as np

ABSENT, HELD = -2, -1  # where a key is: not in the cache, held by a running request
Keys = Sequence[int] | np.ndarray


class _Run:
    """Blocks queued together: ``keys`` (keyed blocks in queue order, from ``pos`` on, some
    stale) of which ``live`` still wait here, or ``live`` empty blocks (``keys`` None)."""

    __slots__ = ("keys", "live", "pos")

    def __init__(self, keys: np.ndarray | None, live: int) -> None:
        self.keys, self.live, self.pos = keys, live, 0


class BlockCache:
    """See the module doc. Requests are tracked by the caller: what one holds is the keys it
    took or committed (``take``, ``commit``) and a count of unkeyed blocks (``allocate`` minus
    what ``commit`` keyed), both handed back to ``release``."""

    __slots__ = ("_next_run", "block_size", "capacity", "evictions", "extra", "n_held", "runs",
                 "unkeyed", "where")

    def __init__(self, capacity: int, block_size: int, keys: int = 1024) -> None:
        if capacity < 0 or block_size < 1:
            raise ValueError("capacity must be >= 0 and block_size >= 1")
        self.capacity, self.block_size = capacity, block_size
        size = max(keys, 1)
        self.where = np.full(size, ABSENT, dtype=np.int64)  # by key: ABSENT, HELD or its run
        self.extra = np.zeros(size, dtype=np.int32)  # by held key: its holders beyond the first
        self.n_held = 0  # keyed blocks held
        self.runs: OrderedDict[int, _Run] = OrderedDict()  # the queue, head first
        self._next_run = 0
        self._append(None, capacity)
        self.unkeyed = 0  # blocks held without a key
        self.evictions = 0  # cached blocks given other content so far

    def _keys(self, keys: Keys) -> np.ndarray:
        """``keys`` as an array, the state arrays grown to hold them."""
        arr = keys if type(keys) is np.ndarray else np.asarray(keys, dtype=np.int64)
        if len(arr):
            top = int(arr.max())
            if top >= len(self.where):
                size = max(2 * len(self.where), top + 1)
                grow = size - len(self.where)
                self.where = np.concatenate([self.where, np.full(grow, ABSENT, np.int64)])
                self.extra = np.concatenate([self.extra, np.zeros(grow, np.int32)])
        return arr

    def _append(self, keys: np.ndarray | None, live: int) -> int:
        run = self._next_run
        if live > 0:
            self.runs[run] = _Run(keys, live)
            self._next_run += 1
        return run

    @property
    def used(self) -> int:
        """Blocks held by running requests."""
        return self.n_held + self.unkeyed

    @property
    def free(self) -> int:
        """Blocks a request may take: the empty ones and the cached ones."""
        return self.capacity - self.n_held - self.unkeyed

    def held_alone(self, keys: Keys) -> int:
        """How many of these held keys no other request holds."""
        arr = keys if type(keys) is np.ndarray else np.asarray(keys, dtype=np.int64)
        return int(np.count_nonzero(self.extra[arr] == 0))

    def cached_in_order(self) -> Iterator[int]:
        """The cached blocks' keys, from the head of the queue."""
        for run_id, run in self.runs.items():
            if run.keys is not None:
                rest = run.keys[run.pos:]
                yield from rest[self.where[rest] == run_id].tolist()

    def cached_among(self, keys: Keys) -> int:
        """How many of these present keys are cached, not held: taking them uses free blocks."""
        arr = self._keys(keys)
        return len(arr) - int(np.count_nonzero(self.where[arr] == HELD))

    def lookup(self, keys: Keys, limit: int) -> tuple[int, int]:
        """``hits(keys, limit)``, and how many of those blocks are cached (not held)."""
        arr = self._keys(keys[:limit])
        places = self.where[arr]
        missing = np.flatnonzero(places == ABSENT)
        hit = int(missing[0]) if len(missing) else len(arr)
        return hit, hit - int(np.count_nonzero(places[:hit] == HELD))

    def hits(self, keys: Keys, limit: int) -> int:
        """How many of the first ``limit`` keys are present (held or cached), from the first
        on: the prompt blocks a request starting now would not compute."""
        return self.lookup(keys, limit)[0]

    def take(self, keys: Keys) -> None:
        """A starting request holds these present blocks (its cache hit)."""
        arr = self._keys(keys)
        places = self.where[arr]
        held = places == HELD
        if held.any():
            self.extra[arr[held]] += 1
        queued = places[~held]
        if len(queued):
            runs = self.runs
            for run_id, count in zip(*np.unique(queued, return_counts=True), strict=True):
                run = runs[int(run_id)]
                run.live -= int(count)
                if not run.live:
                    del runs[int(run_id)]
        self.where[arr] = HELD
        self.n_held += len(queued)

    def allocate(self, n: int) -> bool:
        """``n`` new unkeyed blocks for a request, from the head of the queue (evicting what
        cached blocks hold); False, and nothing done, when fewer than ``n`` are free."""
        if n > self.free:
            return False
        runs, where, left = self.runs, self.where, n
        while left:
            run_id, run = next(iter(runs.items()))
            taken = min(run.live, left)
            keys = run.keys
            if keys is not None:
                end = run.pos
                if len(keys) - end == run.live:  # nothing stale: the next `taken` keys
                    evicted = keys[end:end + taken]
                    end += taken
                else:  # chunks of what is still wanted hold no more than that
                    parts, got = [], 0
                    while got < taken:
                        chunk = keys[end:end + taken - got]
                        end += len(chunk)
                        live = chunk[where[chunk] == run_id]
                        parts.append(live)
                        got += len(live)
                    evicted = np.concatenate(parts)
                run.pos = end
                where[evicted] = ABSENT
                self.evictions += len(evicted)
            run.live -= taken
            if not run.live:
                del runs[run_id]
            left -= taken
        self.unkeyed += n
        return True

    def commit(self, keys: Keys) -> list[int]:
        """Blocks a request holds unkeyed and has just filled get these keys; returns the keys
        it now holds (those not present already)."""
        return self.commit_array(keys).tolist()

    def commit_array(self, keys: Keys) -> np.ndarray:
        """``commit``, the keys as an array."""
        arr = self._keys(keys)
        new = arr[self.where[arr] == ABSENT]
        self.where[new] = HELD
        self.n_held += len(new)
        self.unkeyed -= len(new)
        return new

    def release(self, keys: Keys, unkeyed: int) -> None:
        """A request stops: its ``unkeyed`` blocks and its keyed ones (in prompt order) are no
        longer its own; those held by none join the queue's tail, unkeyed first, then the keyed
        ones from the last to the first."""
        self.unkeyed -= unkeyed
        self._append(None, unkeyed)
        arr = self._keys(keys)
        shared = self.extra[arr] > 0
        if shared.any():
            self.extra[arr[shared]] -= 1
            arr = arr[~shared]
        freed = np.ascontiguousarray(arr[::-1])
        run = self._append(freed, len(freed))
        self.where[freed] = run
        self.n_held -= len(freed)

    def shrink(self, unkeyed: int) -> None:
        """A running request gives back ``unkeyed`` blocks it no longer needs (to the tail)."""
        self.unkeyed -= unkeyed
        self._append(None, unkeyed)


__all__ = ["BlockCache"]
