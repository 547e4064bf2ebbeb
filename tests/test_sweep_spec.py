"""Sweep files: cells expanded from grids and lists, keys, and one error naming the field for
each kind of mistake."""

from __future__ import annotations

import textwrap

import pytest

from conftest import GENERATED_SWEEP, TOY
from llmopt.sweep.spec import SweepError, load_sweep

HEAD = f"""
instances: [{TOY / 'quickstart.yaml'}]
"""


def sweep_file(tmp_path, body: str, head: str = HEAD, name: str = "s.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(head) + textwrap.dedent(body))
    return path


def test_grid_is_the_product_and_cells_are_added(tmp_path):
    sweep = load_sweep(sweep_file(tmp_path, """
        grid: {policy: [baseline, hybrid], clients: {from: 2, to: 6, step: 2}}
        cells: [{problem: binpacking, time_limit_s: 5}]
        """))
    assert len(sweep.cells) == 2 * 3 + 1
    combos = {(c.params.get("policy"), c.params.get("clients")) for c in sweep.cells}
    assert {(p, n) for p in ("baseline", "hybrid") for n in (2, 4, 6)} < combos
    assert sweep.columns == ["instance", "policy", "problem", "time_limit_s", "clients"]
    assert len({c.key for c in sweep.cells}) == len(sweep.cells)


def test_key_depends_on_parameters_and_instance_content_only(tmp_path):
    first = load_sweep(sweep_file(tmp_path, "grid: {policy: [baseline], clients: [2, 3]}\n"))
    again = load_sweep(sweep_file(tmp_path, "name: other\ngrid: {clients: [3, 2], policy: "
                                  "[baseline]}\n", name="t.yaml"))
    assert {c.key for c in first.cells} == {c.key for c in again.cells}
    text = (TOY / "quickstart.yaml").read_text().replace("output_tokens: 310",
                                                          "output_tokens: 311")
    (tmp_path / "q.yaml").write_text(text)
    changed = load_sweep(sweep_file(tmp_path, "grid: {policy: [baseline], clients: [2, 3]}\n",
                                    head=f"instances: [{tmp_path / 'q.yaml'}]\n",
                                    name="u.yaml"))
    assert not {c.key for c in first.cells} & {c.key for c in changed.cells}


def test_log_range_and_generator_parameters(tmp_path):
    sweep = load_sweep(sweep_file(tmp_path, """
        grid:
          policy: [baseline]
          seed: {from: 1, to: 3}
          rate_per_s: {from: 1, to: 100, points: 3, log: true}
        """, head=GENERATED_SWEEP))
    assert sorted({c.params["rate_per_s"] for c in sweep.cells}) == [1.0, 10.0, 100.0]
    assert sorted({c.params["seed"] for c in sweep.cells}) == [1, 2, 3]


BAD = [
    ("grid: {policy: [nosuch]}\n", "grid.policy", "unknown policy"),
    ("grid: {policy: [baselin]}\n", "grid.policy", "did you mean 'baseline'?"),
    ("grid: {policy: [baseline], colour: [1]}\n", "grid.colour", "unknown field"),
    ("grid: {}\n", "grid", "empty"),
    ("grid: {policy: []}\n", "grid.policy", "at least 1"),
    ("grid: {policy: [baseline], replicas: [0]}\n", "grid.replicas[0]", "greater than or equal"),
    ("grid: {policy: [baseline], rate_scale: [-1]}\n", "grid.rate_scale[0]", "greater than"),
    ("grid: {policy: [baseline], clients: {from: 5, to: 1, step: 1}}\n", "grid.clients",
     "to >= from"),
    ("cells: [{policy: baseline, problem: binpacking}]\n", "cells[0]", "exactly one"),
    ("cells: [{clients: 3}]\n", "cells[0]", "exactly one"),
    ("cells: [{problem: binpacking, solver: gurobi}]\n", "cells[0].solver", "unknown solver"),
    ("cells: [{problem: binpacking, bins: 3}]\n", "cells[0].bins", "not an option"),
    ("cells: [{policy: baseline, time_limit_s: 3}]\n", "cells[0].time_limit_s",
     "applies to solves"),
    ("cells: [{policy: baseline, seed: 3}]\n", "cells[0].seed", "not generated"),
    ("cells: [{policy: baseline, instance: other}]\n", "cells[0].instance",
     "unknown instance"),
    ("cells: [baseline]\n", "cells[0]", "mapping"),
    ("cells: []\n", "cells", "no cells"),
    ("grid: {policy: [baseline]}\nmetrics: [speed]\n", "metrics[0]", "unknown metric"),
    ("grid: {policy: [baseline]}\nsearch: {parameter: policy, low: 1, high: 2, metric: "
     "makespan_ms, at_most: 1}\n", "search.parameter", "not a numeric"),
    ("grid: {policy: [baseline], clients: [2]}\nsearch: {parameter: clients, low: 1, high: 4, "
     "metric: makespan_ms, at_most: 1}\n", "grid.clients", "searched parameter"),
    ("grid: {policy: [baseline]}\nsearch: {parameter: clients, low: 4, high: 2, metric: "
     "makespan_ms, at_most: 1}\n", "search.high", "above low"),
    ("grid: {policy: [baseline]}\nsearch: {parameter: clients, low: 1, high: 4, metric: "
     "makespan_ms}\n", "search", "exactly one of at_least"),
    ("grid: {policy: [baseline]}\nsearch: {parameter: rate_scale, low: 0, high: 4, metric: "
     "makespan_ms, at_most: 1}\n", "search.low", "out of the range"),
    ("grid: {policy: [baseline]}\nvalidate: maybe\n", "validate", "boolean"),
    ("cells: [{policy: scls, router: round-robin}]\n", "cells[0].router", "no router applies"),
    # what the instance cannot run or vary is refused at load, not by every cell at run time
    ("grid: {policy: [sarathi]}\n", "grid.policy", "family infermax"),
    ("cells: [{problem: infermax-csp}]\n", "cells[0].problem", "family infermax"),
    ("grid: {policy: [plan]}\n", "grid.policy", "a sweep cannot give"),
    ("grid: {policy: [baseline], slo_scale: [0.5]}\n", "grid.slo_scale", "no SLO targets"),
    # a search's probes are cells too: the same errors as the grid's, naming the search
    ("grid: {policy: [baseline]}\nsearch: {parameter: rate_per_s, low: 1, high: 10, metric: "
     "makespan_ms, at_most: 1000}\n", "search.parameter", "lists its requests"),
    ("grid: {policy: [baseline]}\nsearch: {parameter: time_limit_s, low: 1, high: 10, "
     "metric: makespan_ms, at_most: 1000}\n", "search.parameter", "applies to solves"),
    ("grid: {policy: [baseline]}\nsearch: {parameter: clients, low: 1, high: 10, "
     "metric: objective, at_most: 1000}\n", "search.metric", "not a metric of a replay"),
    ("grid: {policy: [baseline]}\nsearch: {parameter: clients, low: 1, high: 10, "
     "metric: attainment, at_least: 0.9}\n", "search.metric", "no SLO targets"),
    ("grid: {policy: [baseline]}\nsearch: {parameter: clients, low: 1, high: 10, "
     "metric: attainment, at_least: 90}\n", "search.at_least", "a share in [0, 1]"),
]


@pytest.mark.parametrize(("body", "field", "reason"), BAD, ids=[b[1] + "-" + b[2] for b in BAD])
def test_each_mistake_names_its_field(tmp_path, body, field, reason):
    with pytest.raises(SweepError) as caught:
        load_sweep(sweep_file(tmp_path, body))
    assert caught.value.field == field
    assert reason in str(caught.value)
    assert str(tmp_path / "s.yaml") in str(caught.value)


def test_instance_errors_name_the_sweep_and_the_instance(tmp_path):
    with pytest.raises(SweepError) as caught:
        load_sweep(sweep_file(tmp_path, "grid: {policy: [baseline]}\n",
                              head="instances: [nowhere.yaml]\n"))
    assert caught.value.field == "instances[0]"
    assert "nowhere.yaml" in str(caught.value) and "not found" in str(caught.value)


def test_several_instances_are_an_axis_of_their_own(tmp_path):
    """A cell naming no instance runs on each (as the guide says); one naming it, on it."""
    head = f"instances: [{TOY / 'quickstart.yaml'}, {TOY / 'two-clients.yaml'}]\n"
    cells = load_sweep(sweep_file(tmp_path, "cells: [{policy: baseline}, {policy: hybrid, "
                                  "instance: two-clients}]\n", head=head)).cells
    assert [(c.params["policy"], c.params["instance"]) for c in cells] == [
        ("baseline", "quickstart"), ("baseline", "two-clients"), ("hybrid", "two-clients")]
    for grid in ("{policy: [baseline]}", "{instance: [quickstart, two-clients], "
                                         "policy: [baseline]}"):
        sweep = load_sweep(sweep_file(tmp_path, f"grid: {grid}\n", head=head))
        assert sorted(c.params["instance"] for c in sweep.cells) == ["quickstart",
                                                                     "two-clients"]
    with pytest.raises(SweepError, match="instance"):
        load_sweep(sweep_file(tmp_path, "cells: [{policy: baseline, instance: nope}]\n",
                              head=head))


def test_a_search_range_outside_the_parameters_says_which_range(tmp_path):
    with pytest.raises(SweepError, match=r"search\.low: value 0\.0: .*greater than 0"):
        load_sweep(sweep_file(tmp_path, "grid: {policy: [baseline]}\nsearch: {parameter: "
                              "rate_per_s, low: 0, high: 10, metric: makespan_ms, "
                              "at_most: 100}\n"))
