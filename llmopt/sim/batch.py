"""One iteration's batch, as a policy forms it: prefill/refill chunks, decodes, and the budgets
left (KV memory, tokens, prefill tokens). The policy fills it through the replica's actions
(``Replica.admit``, ``Replica.evict``, ``Batch.add_chunk``, ``Batch.add_decodes``, …); the
replica then runs it."""

from __future__ import annotations


class Batch:
    """A batch being formed: prefill/refill chunks, decodes (every request in the decode phase,
    or an explicit list), KV and token budgets left, phase so far."""

    __slots__ = (
        "all_decodes",
        "chunks",
        "dec",
        "free",
        "members",
        "n_dec",
        "phase",
        "prefill",
        "tokens",
    )

    def __init__(self, free: float, tokens: float, prefill: float) -> None:
        self.free, self.tokens, self.prefill = free, tokens, prefill
        self.chunks: list[tuple[int, int]] = []  # (request, tokens)
        self.dec: list[int] = []
        self.all_decodes = False
        self.n_dec = 0
        self.members: set[int] = set()
        self.phase: str | None = None

    def add_chunk(self, i: int, c: int) -> None:
        self.chunks.append((i, c))
        self.members.add(i)
        self.tokens -= c
        self.prefill -= c
        self.phase = self.phase or "prefill"

    def add_decodes(self, idx: list[int]) -> None:
        self.dec.extend(idx)
        self.members.update(idx)
        self.count_decodes(len(idx))

    def add_all_decodes(self, n: int) -> None:
        """Every running request in the decode phase (``n`` of them) decodes."""
        self.all_decodes = True
        self.count_decodes(n)

    def count_decodes(self, n: int) -> None:
        """``n`` more decodes, their requests listed later (``dec``/``all_decodes``)."""
        self.n_dec += n
        self.tokens -= n
        self.phase = self.phase or "decode"

    @property
    def empty(self) -> bool:
        return not self.chunks and not self.n_dec
