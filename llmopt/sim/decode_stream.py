"""The decode stream of the continuous-batching engine: the running requests in the decode phase
that decode in every iteration of the stream, advanced lazily.

Most batches of a continuous-batching schedule decode every running request in the decode
phase. Each such decode adds one to the request's m (KVs cached), S (tokens) and generated
count, so a member's state is its state when it joined (or was last synced) plus the number of
stream iterations since: one counter ``G`` advances all members at once, and the aggregates the
scheduler needs (Σ m, Σ max(m, m_reserve), how many members need a new KV) are kept as sums of
``m − G_base`` so that each stays exact in O(1) per iteration. Two event heaps say when a member
outgrows its reservation and when it finishes.

With a prefix cache (``block`` > 0) memory comes in blocks of ``block`` tokens, and a member
holding at least its reservation (a multiple of the block) needs a new block when its m is a
multiple of the block: the growing members are also counted by m − base modulo the block, so
that how many need one now, and how many blocks the next R iterations take, are O(block).

Decode segments (maximal runs of consecutive iterations with the request decoding) come from
each member's tenure ``[g0, g1)`` in stream iterations, cut wherever an iteration ran without the
stream (``pause``); they are built with numpy at the end.
"""

from __future__ import annotations

import heapq
import math
from array import array

import numpy as np


class DecodeStream:
    def __init__(self, m: list[int], S: list[int], gen: list[int], reserve: list[int],
                 outputs: list[int], block: int = 0) -> None:
        # the engine's per-request lists, shared: members' entries hold their state at `base`
        self.m, self.S, self.gen, self.reserve, self.outputs = m, S, gen, reserve, outputs
        n = len(m)
        self.G = 0
        self.members: set[int] = set()
        self.base = [0] * n
        self.growing = [False] * n
        self.epoch = [0] * n
        self.sum_base = 0      # Σ (m − base) over members
        self.grow_count = 0    # members holding at least their reservation (m ≥ m_reserve)
        self.grow_base = 0     # Σ (m − base) over those
        self.reserved = 0      # Σ m_reserve over the others
        self.block = block
        self.grow_res = [0] * block  # growing members by (m − base) mod block
        self._grow_at: list[tuple[int, int, int]] = []
        self._done_at: list[tuple[int, int, int]] = []
        self.starts = array("d")  # per stream iteration
        self.ends = array("d")
        self.breaks: list[int] = []
        self.tenures: list[tuple[int, int, int, int]] = []
        self._tenure = [(0, -1)] * n

    def __len__(self) -> int:
        return len(self.members)

    def __contains__(self, i: int) -> bool:
        return i in self.members

    def m_of(self, i: int) -> int:
        return self.m[i] + self.G - self.base[i] if i in self.members else self.m[i]

    def gen_of(self, i: int) -> int:
        return self.gen[i] + self.G - self.base[i] if i in self.members else self.gen[i]

    def sync(self, i: int) -> None:
        """Write member ``i``'s current m, S and generated count to the engine's lists."""
        d = self.G - self.base[i]
        if d:
            self.m[i] += d
            self.S[i] += d
            self.gen[i] += d
            self.base[i] = self.G

    def join(self, i: int, client: int) -> None:
        G = self.G
        self.members.add(i)
        self.base[i] = G
        self.epoch[i] += 1
        m, r = self.m[i], self.reserve[i]
        self.sum_base += m - G
        if m >= r:
            self.growing[i] = True
            self.grow_count += 1
            self.grow_base += m - G
            if self.block:
                self.grow_res[(m - G) % self.block] += 1
        else:
            self.growing[i] = False
            self.reserved += r
            heapq.heappush(self._grow_at, (G + r - m, i, self.epoch[i]))
        heapq.heappush(self._done_at, (G + self.outputs[i] - self.gen[i], i, self.epoch[i]))
        self._tenure[i] = (G, client)

    def leave(self, i: int) -> None:
        self.sync(i)
        self.members.remove(i)
        self.epoch[i] += 1
        d = self.m[i] - self.G
        self.sum_base -= d
        if self.growing[i]:
            self.grow_count -= 1
            self.grow_base -= d
            if self.block:
                self.grow_res[d % self.block] -= 1
        else:
            self.reserved -= self.reserve[i]
        g0, client = self._tenure[i]
        if g0 < self.G:
            self.tenures.append((i, client, g0, self.G))

    def kv(self) -> int:
        """Σ m over members."""
        return self.sum_base + len(self.members) * self.G

    def held(self) -> int:
        """Σ max(m, m_reserve) over members: the KV memory they hold."""
        return self.reserved + self.grow_base + self.grow_count * self.G

    def needs(self) -> int:
        """Members whose next decode needs a new KV (m + 1 > m_reserve)."""
        return self.grow_count

    def block_needs(self) -> int:
        """Blocks the next iteration's decodes take (block mode): growing members whose m is a
        multiple of the block."""
        return self.grow_res[-self.G % self.block]

    def _by_first_need(self) -> list[int]:
        """Growing members by the iteration (0 .. block − 1 from now) of their next new
        block."""
        B, G = self.block, self.G
        out = [0] * B
        for key, count in enumerate(self.grow_res):
            if count:
                out[(-key - G) % B] += count
        return out

    def blocks_over(self, rounds: int) -> int:
        """Blocks the next ``rounds`` iterations of the stream take (block mode; no member
        passes its reservation in them)."""
        B = self.block
        q, r = divmod(rounds, B)
        first = self._by_first_need()
        return q * self.grow_count + sum(first[:r])

    def rounds_within(self, free_blocks: int) -> int:
        """The most iterations of the stream whose new blocks fit in ``free_blocks`` (block
        mode; members growing: at least one)."""
        B, n = self.block, self.grow_count
        q = free_blocks // n
        left = free_blocks - q * n
        r = 0
        for count in self._by_first_need()[:B - 1]:
            if count > left:
                break
            left -= count
            r += 1
        return q * B + r

    def need_of_each(self) -> dict[int, int]:
        """For each member, whether its next decode needs a new KV."""
        growing = self.growing
        return {i: growing[i] for i in self.members}

    def pause(self) -> None:
        """An iteration ran without the stream: its members' decode segments end here."""
        if self.members and (not self.breaks or self.breaks[-1] != self.G):
            self.breaks.append(self.G)

    def step(self, start: float, end: float) -> list[int]:
        """One iteration in which every member decodes; the members it finishes."""
        self.starts.append(start)
        self.ends.append(end)
        self.G += 1
        G = self.G
        while self._grow_at and self._grow_at[0][0] <= G:
            _, i, e = heapq.heappop(self._grow_at)
            if e == self.epoch[i]:
                self.growing[i] = True
                self.reserved -= self.reserve[i]
                self.grow_count += 1
                self.grow_base += self.m[i] - self.base[i]
                if self.block:
                    self.grow_res[(self.m[i] - self.base[i]) % self.block] += 1
        done = []
        while self._done_at and self._done_at[0][0] <= G:
            _, i, e = heapq.heappop(self._done_at)
            if e == self.epoch[i]:
                done.append(i)
        return done

    def horizon(self) -> float:
        """The next G at which a member outgrows its reservation or finishes (inf: none)."""
        nxt = math.inf
        for heap in (self._grow_at, self._done_at):
            while heap and heap[0][2] != self.epoch[heap[0][1]]:
                heapq.heappop(heap)
            if heap:
                nxt = min(nxt, heap[0][0])
        return nxt

    def advance(self, starts: np.ndarray, ends: np.ndarray) -> list[int]:
        """``len(starts)`` iterations in which every member decodes, none of them before the
        horizon; the members the last one finishes."""
        self.starts.frombytes(np.ascontiguousarray(starts[:-1], dtype=float).tobytes())
        self.ends.frombytes(np.ascontiguousarray(ends[:-1], dtype=float).tobytes())
        self.G += len(starts) - 1
        return self.step(float(starts[-1]), float(ends[-1]))

    def segments(self, block: int = 4096
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Decode segments of every closed tenure: request, client, start, end, tokens (tenures
        are expanded ``block`` at a time, so that only the output is full-size)."""
        tenures = np.asarray(self.tenures, dtype=np.int32).reshape(-1, 4)
        cuts = np.asarray(self.breaks, dtype=np.int32)
        lo = np.searchsorted(cuts, tenures[:, 2], side="right").astype(np.int32)
        pieces = np.searchsorted(cuts, tenures[:, 3], side="left").astype(np.int32) - lo + 1
        total = int(pieces.sum())
        req = np.empty(total, dtype=np.int32)
        client = np.empty(total, dtype=np.int32)
        starts = np.empty(total)
        ends = np.empty(total)
        tokens = np.empty(total, dtype=np.int32)
        g_start = np.frombuffer(self.starts, dtype=float)
        g_end = np.frombuffer(self.ends, dtype=float)
        pos = 0
        for a in range(0, len(tenures), block):
            t, n, first = tenures[a:a + block], pieces[a:a + block], lo[a:a + block]
            owner = np.repeat(np.arange(len(t)), n)
            j = np.arange(len(owner)) - np.repeat(np.cumsum(n) - n, n)
            at = first[owner] + j  # index in cuts of the cut after piece j
            if len(cuts):
                top = len(cuts) - 1
                g0 = np.where(j == 0, t[owner, 2], cuts[np.clip(at - 1, 0, top)])
                g1 = np.where(j == n[owner] - 1, t[owner, 3], cuts[np.clip(at, 0, top)])
            else:
                g0, g1 = t[owner, 2], t[owner, 3]
            out = slice(pos, pos + len(owner))
            req[out], client[out] = t[owner, 0], t[owner, 1]
            starts[out], ends[out], tokens[out] = g_start[g0], g_end[g1 - 1], g1 - g0
            pos += len(owner)
        return req, client, starts, ends, tokens
