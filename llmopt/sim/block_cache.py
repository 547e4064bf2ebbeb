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

The queue is kept as runs, one per release (its keyed blocks in queue order) or of empty blocks,
so that a replay's millions of block moves are bulk dictionary operations: a key present in the
cache maps to the run holding it, or to HELD (with the holders beyond the first counted apart);
a block taken back by a hit leaves a stale entry in its run, skipped when the run reaches the
head.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from itertools import compress, filterfalse, islice, repeat, takewhile
from operator import is_not

HELD = -1  # where a held keyed block is
PRESENT = partial(is_not, None)  # a key's place is known (``dict.get`` gives None otherwise)


class _Run:
    """Blocks queued together: ``keys`` (keyed blocks in queue order, from ``pos`` on, some
    stale) of which ``live`` still wait here, or ``live`` empty blocks (``keys`` None)."""

    __slots__ = ("keys", "live", "pos")

    def __init__(self, keys: list[int] | None, live: int) -> None:
        self.keys, self.live, self.pos = keys, live, 0


class BlockCache:
    """See the module doc. Requests are tracked by the caller: what one holds is the keys it
    took or committed (``take``, ``commit``) and a count of unkeyed blocks (``allocate`` minus
    what ``commit`` keyed), both handed back to ``release``."""

    __slots__ = ("_next_run", "block_size", "capacity", "evictions", "extra", "n_held", "runs",
                 "unkeyed", "where")

    def __init__(self, capacity: int, block_size: int) -> None:
        if capacity < 0 or block_size < 1:
            raise ValueError("capacity must be >= 0 and block_size >= 1")
        self.capacity, self.block_size = capacity, block_size
        self.where: dict[int, int] = {}  # every present key -> its run in the queue, or HELD
        self.extra: dict[int, int] = {}  # held keys held by more than one request: how many more
        self.n_held = 0  # keyed blocks held
        self.runs: OrderedDict[int, _Run] = OrderedDict()  # the queue, head first
        self._next_run = 0
        self._append(None, capacity)
        self.unkeyed = 0  # blocks held without a key
        self.evictions = 0  # cached blocks given other content so far

    def _append(self, keys: list[int] | None, live: int) -> int:
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

    def holders(self, key: int) -> int:
        """Requests holding keyed block ``key`` (0: cached or absent)."""
        return 1 + self.extra.get(key, 0) if self.where.get(key) == HELD else 0

    def held_alone(self, keys: Sequence[int]) -> int:
        """How many of these held keys no other request holds."""
        extra = self.extra
        return len(keys) - sum(map(extra.__contains__, keys)) if extra else len(keys)

    def cached_in_order(self) -> Iterator[int]:
        """The cached blocks' keys, from the head of the queue."""
        where = self.where
        for run_id, run in self.runs.items():
            if run.keys is not None:
                yield from (k for k in run.keys[run.pos:] if where.get(k) == run_id)

    def cached_among(self, keys: Sequence[int]) -> int:
        """How many of these present keys are cached, not held: taking them uses free blocks."""
        return len(keys) - list(map(self.where.__getitem__, keys)).count(HELD)

    def lookup(self, keys: Sequence[int], limit: int) -> tuple[int, int]:
        """``hits(keys, limit)``, and how many of those blocks are cached (not held), in one
        pass."""
        places = list(takewhile(PRESENT, map(self.where.get, islice(keys, limit))))
        return len(places), len(places) - places.count(HELD)

    def hits(self, keys: Sequence[int], limit: int) -> int:
        """How many of the first ``limit`` keys are present (held or cached), from the first
        on: the prompt blocks a request starting now would not compute."""
        return len(list(takewhile(self.where.__contains__, islice(keys, limit))))

    def take(self, keys: Sequence[int]) -> None:
        """A starting request holds these present blocks (its cache hit)."""
        where, runs = self.where, self.runs
        places = list(map(where.__getitem__, keys))
        counts = Counter(places)
        shared = counts.pop(HELD, 0)
        if shared:
            extra = self.extra
            for key, place in zip(keys, places, strict=True):
                if place == HELD:
                    extra[key] = extra.get(key, 0) + 1
        for run_id, count in counts.items():
            run = runs[run_id]
            run.live -= count
            if not run.live:
                del runs[run_id]
        where.update(zip(keys, repeat(HELD)))
        self.n_held += len(keys) - shared

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
                    live = keys[end:end + taken]
                    end += taken
                else:  # chunks of what is still wanted hold no more than that
                    live = []
                    while len(live) < taken:
                        chunk = keys[end:end + taken - len(live)]
                        end += len(chunk)
                        live += compress(chunk, map(run_id.__eq__, map(where.get, chunk)))
                run.pos = end
                deque(map(where.__delitem__, live), maxlen=0)
                self.evictions += len(live)
            run.live -= taken
            if not run.live:
                del runs[run_id]
            left -= taken
        self.unkeyed += n
        return True

    def commit(self, keys: Iterable[int]) -> list[int]:
        """Blocks a request holds unkeyed and has just filled get these keys; returns the keys
        it now holds (those not present already)."""
        new = list(filterfalse(self.where.__contains__, keys))
        self.where.update(zip(new, repeat(HELD)))
        self.n_held += len(new)
        self.unkeyed -= len(new)
        return new

    def release(self, keys: list[int], unkeyed: int) -> None:
        """A request stops: its ``unkeyed`` blocks and its keyed ones (in prompt order) are no
        longer its own; those held by none join the queue's tail, unkeyed first, then the keyed
        ones from the last to the first."""
        self.unkeyed -= unkeyed
        self._append(None, unkeyed)
        extra = self.extra
        shared = extra.keys() & keys if extra else None
        if shared:
            for key in shared:
                if extra[key] > 1:
                    extra[key] -= 1
                else:
                    del extra[key]
            k = len(shared)
            if shared.issuperset(keys[:k]):  # as usual, the prompt's first blocks
                freed = keys[:k - 1:-1]  # keys[k:] from the last
            else:
                freed = list(filterfalse(shared.__contains__, reversed(keys)))
        else:
            freed = keys[::-1]
        run = self._append(freed, len(freed))
        self.where.update(zip(freed, repeat(run)))
        self.n_held -= len(freed)

    def shrink(self, unkeyed: int) -> None:
        """A running request gives back ``unkeyed`` blocks it no longer needs (to the tail)."""
        self.unkeyed -= unkeyed
        self._append(None, unkeyed)


__all__ = ["BlockCache"]
