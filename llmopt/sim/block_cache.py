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
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence


class BlockCache:
    """See the module doc. Requests are tracked by the caller: what one holds is the keys it
    took or committed (``take``, ``commit``) and a count of unkeyed blocks (``allocate`` minus
    what ``commit`` keyed), both handed back to ``release``."""

    __slots__ = ("_runs", "block_size", "capacity", "evictions", "held", "queue", "unkeyed")

    def __init__(self, capacity: int, block_size: int) -> None:
        if capacity < 0 or block_size < 1:
            raise ValueError("capacity must be >= 0 and block_size >= 1")
        self.capacity, self.block_size = capacity, block_size
        self.held: dict[int, int] = {}  # keyed blocks held: key -> requests holding it
        # blocks held by none, head first: a key (>= 0) -> 1 for a cached block, a run id (< 0)
        # -> how many empty blocks it stands for
        self.queue: OrderedDict[int, int] = OrderedDict()
        self._runs = -1
        self._append_empty(capacity)
        self.unkeyed = 0  # blocks held without a key
        self.evictions = 0  # cached blocks given other content so far

    def _append_empty(self, n: int) -> None:
        if n > 0:
            self.queue[self._runs] = n
            self._runs -= 1

    @property
    def used(self) -> int:
        """Blocks held by running requests."""
        return len(self.held) + self.unkeyed

    @property
    def free(self) -> int:
        """Blocks a request may take: the empty ones and the cached ones."""
        return self.capacity - len(self.held) - self.unkeyed

    def cached_among(self, keys: Iterable[int]) -> int:
        """How many of these present keys are cached, not held: taking them uses free blocks."""
        queue = self.queue
        return sum(1 for k in keys if k in queue)

    def hits(self, keys: Sequence[int], limit: int) -> int:
        """How many of the first ``limit`` keys are present (held or cached), from the first
        on: the prompt blocks a request starting now would not compute."""
        held, queue = self.held, self.queue
        n = 0
        while n < limit:
            key = keys[n]
            if key not in held and key not in queue:
                break
            n += 1
        return n

    def take(self, keys: Iterable[int]) -> None:
        """A starting request holds these present blocks (its cache hit)."""
        held, queue = self.held, self.queue
        for key in keys:
            if key in held:
                held[key] += 1
            else:
                del queue[key]
                held[key] = 1

    def allocate(self, n: int) -> bool:
        """``n`` new unkeyed blocks for a request, from the head of the queue (evicting what
        cached blocks hold); False, and nothing done, when fewer than ``n`` are free."""
        if n > self.free:
            return False
        queue, left = self.queue, n
        while left:
            key, count = queue.popitem(last=False)
            if key >= 0:
                self.evictions += 1
                left -= 1
            elif count > left:
                queue[key] = count - left
                queue.move_to_end(key, last=False)
                left = 0
            else:
                left -= count
        self.unkeyed += n
        return True

    def commit(self, keys: Iterable[int]) -> list[int]:
        """Blocks a request holds unkeyed and has just filled get these keys; returns the keys
        it now holds (those not present already)."""
        held, queue = self.held, self.queue
        new = [k for k in keys if k not in held and k not in queue]
        for key in new:
            held[key] = 1
        self.unkeyed -= len(new)
        return new

    def release(self, keys: Sequence[int], unkeyed: int) -> None:
        """A request stops: its ``unkeyed`` blocks and its keyed ones (in prompt order) are no
        longer its own; those held by none join the queue's tail, unkeyed first, then the keyed
        ones from the last to the first."""
        self.unkeyed -= unkeyed
        self._append_empty(unkeyed)
        held, queue = self.held, self.queue
        for key in reversed(keys):
            count = held[key]
            if count > 1:
                held[key] = count - 1
            else:
                del held[key]
                queue[key] = 1

    def shrink(self, unkeyed: int) -> None:
        """A running request gives back ``unkeyed`` blocks it no longer needs (to the tail)."""
        self.unkeyed -= unkeyed
        self._append_empty(unkeyed)


__all__ = ["BlockCache"]
