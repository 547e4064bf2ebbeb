"""Moore and Hodgson's rule (llmopt.sequencing) against every order of small job sets."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from llmopt.sequencing import moore_hodgson


def most_on_time(jobs: list[tuple[float, float]], start: float) -> int:
    """The most jobs meeting their due dates over every subset run in due-date order (a subset
    meets its due dates in some order iff it does in due-date order)."""
    for size in range(len(jobs), 0, -1):
        for subset in itertools.combinations(sorted(jobs), size):
            clock, ok = start, True
            for due, time in subset:
                clock += time
                ok = ok and clock <= due
            if ok:
                return size
    return 0


jobs_strategy = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 10)), max_size=7)


@settings(max_examples=400, deadline=None)
@given(jobs_strategy, st.integers(0, 5))
def test_keeps_as_many_as_the_best_order_and_those_meet_their_due_dates(jobs, start) -> None:
    as_float = [(float(d), float(p)) for d, p in jobs]
    dropped = moore_hodgson(as_float, float(start))
    kept = sorted(job for k, job in enumerate(as_float) if k not in set(dropped))
    assert len(set(dropped)) == len(dropped)
    clock = float(start)
    for due, time in kept:
        clock += time
        assert clock <= due
    assert len(kept) == most_on_time(as_float, float(start))


def test_drops_the_longest_so_far() -> None:
    # due dates 3, 4, 5: the second passes its due date (2 + 3 > 4), and the longest so far
    # (the second, 3) goes; the third then fits (2 + 1 ≤ 5)
    assert moore_hodgson([(3.0, 2.0), (4.0, 3.0), (5.0, 1.0)]) == [1]
    assert moore_hodgson([]) == []
