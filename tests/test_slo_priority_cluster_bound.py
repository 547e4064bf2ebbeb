"""The upper bound on G (eq 2) over Algorithm 2's plans on several model instances
(``cluster.cluster_g_bound``): never below the best G of a brute force over every split of the
requests among the instances and every plan of each (tiny instances), the one-instance bound at
W = 1, and ``llmopt compare`` shows it beside the replays and Algorithm 2's plan."""

from __future__ import annotations

import itertools
import random
from functools import cache

import pytest

from llmopt.data.instance import instance_from_mapping
from llmopt.problems.slo_priority.cluster import (
    cluster_g_bound,
    cluster_latency_lower_bound,
    subset,
)
from llmopt.problems.slo_priority.model import SloPriorityData, evaluate, g_per_s
from llmopt.problems.slo_priority.solve import simple_bound
from llmopt.problems.workflows.compare import BY_MODEL, compare
from llmopt.report.compare import render

PROFILE = "huang-qwen25-7b-v100x2"


def random_instance(n: int, seed: int, max_batch: int, instances: int):
    rng = random.Random(seed)
    reqs = []
    for k in range(n):
        r = {"id": f"r{k}", "input_tokens": rng.randint(20, 700),
             "output_tokens": rng.randint(2, 400)}
        alone = 0.06 * r["input_tokens"] + 17 * r["output_tokens"] + 60  # about, in ms
        loose = rng.choice([0.7, 1.2, 2.0, 3.5, 6.0])
        if rng.random() < 0.5:
            r["e2e_slo_ms"] = round(alone * loose, 1)
        else:
            r["ttft_slo_ms"] = round(80 * loose * rng.choice([1, 3]), 1)
            r["tpot_slo_ms"] = rng.choice([17.5, 19.0, 25.0])
        reqs.append(r)
    return instance_from_mapping({"name": f"cluster-{seed}", "model": PROFILE,
                                  "system": {"clients": max_batch, "instances": instances},
                                  "requests": reqs})


def plans(members: tuple[int, ...], max_batch: int):
    """Every ordered split of ``members`` into batches of 1..max_batch."""
    if not members:
        yield ()
        return
    for size in range(1, min(max_batch, len(members)) + 1):
        for batch in itertools.combinations(members, size):
            rest = tuple(i for i in members if i not in batch)
            for tail in plans(rest, max_batch):
                yield (batch, *tail)


def brute_force_g(data: SloPriorityData, instances: int) -> float:
    """max over every split among the instances and every plan of each of Σ n / Σ t."""

    @cache
    def least_t(members: tuple[int, ...]) -> dict[int, float]:
        """For the requests ``members`` on one instance: the least t of a plan meeting n."""
        if not members:
            return {0: 0.0}
        sub = subset(data, list(members))
        best: dict[int, float] = {}
        for plan in plans(tuple(range(len(members))), data.max_batch):
            ev = evaluate(sub, plan)
            best[ev.n_met] = min(best.get(ev.n_met, float("inf")), ev.total_ms)
        return best

    top = 0.0
    for split in itertools.product(range(instances), repeat=data.n):
        if split and split[0] != 0:   # instances are alike: the first request on instance 0
            continue
        groups = [tuple(i for i in range(data.n) if split[i] == w) for w in range(instances)]
        for combo in itertools.product(*(least_t(g).items() for g in groups)):
            top = max(top, g_per_s(sum(n for n, _ in combo), sum(t for _, t in combo)))
    return top


@pytest.mark.parametrize("seed", range(12))
def test_the_cluster_bound_is_above_the_brute_force(seed):
    rng = random.Random(seed)
    n, batch, instances = rng.randint(2, 5), rng.choice([1, 2]), rng.choice([2, 2, 3])
    data = SloPriorityData.from_instance(random_instance(n, seed, batch, instances))
    best = brute_force_g(data, instances)
    bound = cluster_g_bound(data, instances)
    assert bound >= best * (1 - 1e-12), (bound, best)
    # the least t it uses is below every plan's t, whatever its met count
    assert cluster_latency_lower_bound(data, instances) <= min(
        t for t in _all_totals(data, instances)) * (1 + 1e-12)


def _all_totals(data: SloPriorityData, instances: int):
    for split in itertools.product(range(instances), repeat=data.n):
        total = 0.0
        for w in range(instances):
            members = [i for i in range(data.n) if split[i] == w]
            if members:
                sub = subset(data, members)
                total += min(evaluate(sub, p).total_ms
                             for p in plans(tuple(range(len(members))), data.max_batch))
        yield total


def test_one_instance_is_the_one_instance_bound():
    data = SloPriorityData.from_instance(random_instance(6, 1, 2, 1))
    assert cluster_g_bound(data, 1) == simple_bound(data)


def test_more_instances_allow_more():
    data = SloPriorityData.from_instance(random_instance(8, 4, 2, 1))
    bounds = [cluster_g_bound(data, w) for w in (1, 2, 4, 8)]
    assert bounds == sorted(bounds)


def test_compare_shows_the_bound_on_several_instances():
    inst = random_instance(6, 7, 2, 2)
    comparison = compare(inst, ["huang-vllm"], time_limit_s=5)
    assert comparison.bound_g_per_s is not None
    table = comparison.table
    scored = table[table["scored_by"] == BY_MODEL]
    assert len(scored) == 1 and scored["schedule"].iloc[0].startswith("Algorithm 2")
    assert (scored["g_per_s"] <= comparison.bound_g_per_s).all()
    assert scored["gap_to_bound"].between(0, 1).all()
    assert any(name.endswith("replayed") for name in table["schedule"])
    text = render(comparison, inst).markdown
    assert "2 model instances" in text and "no plan and no bound" not in text
