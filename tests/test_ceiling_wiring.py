"""The proven SLO ceiling beside every policy (issue 32, items 2 and 3): ``llmopt compare`` and
``llmopt replay`` print "at most X of N requests (Y %) can meet their SLOs in any schedule" on
slo-chat (200 requests) and on two model instances, never below a replayed attainment (a
policy ignoring the KV memory against the ceiling without the KV rule); Ctrl-C keeps the best
bound found; a rate search for attainment gets a goodput bound above every policy's goodput,
on the same arrival draws, and the ceiling's curve in its plot."""

from __future__ import annotations

import re
import signal
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from conftest import TOY
from llmopt.data.instance import load_instance
from llmopt.problems.registry import FAMILIES
from llmopt.problems.workflows import ceiling as workflow
from llmopt.problems.workflows.ceiling import infermax_ceiling, policy_ceilings
from llmopt.sweep.runner import run_sweep
from llmopt.sweep.spec import load_sweep

SLO_CHAT = TOY / "slo-chat.yaml"
SENTENCE = re.compile(r"at most (\d+) of (\d+) requests \(([\d.]+) %\) can meet their SLOs in "
                      r"any schedule( on 2 model instances with any router)? \(method: ")
POLICIES = "vllm,sarathi,vllm-unlimited"


def two_replicas(tmp_path: Path, rate: float = 150.0) -> Path:
    """slo-chat at ``rate`` requests/s on two model instances."""
    path = tmp_path / "slo-chat-x2.yaml"
    path.write_text(SLO_CHAT.read_text().replace("system: {clients: 256}",
                                                 "system: {clients: 256, instances: 2}")
                    .replace("rate_per_s: 40", f"rate_per_s: {rate:g}")
                    .replace("name: slo-chat", "name: slo-chat-x2"))
    return path


def sentences(text: str) -> list[tuple[int, int, bool]]:
    """(X, N, on two instances) of each ceiling sentence in ``text``."""
    return [(int(m[1]), int(m[2]), bool(m[4])) for m in SENTENCE.finditer(text)]


@pytest.mark.parametrize("two", [False, True])
def test_compare_prints_the_ceiling_above_every_attainment(cli, tmp_path, two):
    path = two_replicas(tmp_path) if two else SLO_CHAT
    result = cli("compare", path, "--policy", POLICIES, "--out", tmp_path, "-t", "20")
    assert result.exit_code == 0, result.output
    found = sentences(result.output)
    assert len(found) == 2 and all(n == 200 and on_two == two for _, n, on_two in found)
    within, ignoring = (x for x, _, _ in found)
    assert "SLO ceiling for vllm-unlimited (ignores the KV memory M)" in result.output
    name = "slo-chat-x2" if two else "slo-chat"
    table = pd.read_csv(tmp_path / name / "compare.csv").set_index("schedule")
    for policy in POLICIES.split(","):
        met = round(table.loc[policy, "attainment"] * 200)
        limit = ignoring if policy == "vllm-unlimited" else within
        assert met <= limit, (policy, met, limit)
        assert table.loc[policy, "gap_to_ceiling"] == pytest.approx(limit / 200 - met / 200)
    assert "gap to ceiling" in (tmp_path / name / "compare.md").read_text()


@pytest.mark.parametrize("router", [None, "least-outstanding-tokens"])
def test_replay_prints_the_ceiling_on_two_instances(cli, tmp_path, router):
    args = ["--router", router] if router else []
    result = cli("replay", two_replicas(tmp_path, 400.0), "--policy", POLICIES, *args,
                 "--out", tmp_path, "--no-plot")
    assert result.exit_code == 0, result.output
    found = sentences(result.output)
    assert len(found) == 2 and all(on_two for _, _, on_two in found)
    within, ignoring = found[0][0], found[1][0]
    assert within < 200  # 400 requests/s: the ceiling binds
    for policy in POLICIES.split(","):
        shares = re.search(rf"^ {re.escape(policy)} .*?(\d+\.\d)% │ +[\d.]+% │ +[\d.]+% │ +"
                           rf"(-?[\d.]+)", result.output, re.M)
        assert shares is not None, result.output
        met = round(float(shares[1]) / 100 * 200)
        limit = ignoring if policy == "vllm-unlimited" else within
        assert met <= limit and float(shares[2]) >= 0
    quiet = cli("replay", SLO_CHAT, "--policy", "vllm", "--out", tmp_path, "--no-plot",
                "--no-ceiling")
    assert quiet.exit_code == 0 and not sentences(quiet.output)
    assert "to ceiling" not in quiet.output


def test_a_family_without_a_ceiling_says_so(cli, tmp_path):
    result = cli("replay", TOY / "huang-chat-code.yaml", "--out", tmp_path, "--no-plot")
    assert result.exit_code == 0, result.output
    assert "no proven SLO ceiling for profile family bilinear" in result.output
    assert policy_ceilings(load_instance(TOY / "quickstart.yaml"), ["baseline"], 5.0) is None


def test_ctrl_c_keeps_the_best_bound_found(monkeypatch):
    """A SIGINT while the ceiling runs stops it (the flag of ``sigint_sets``, not a
    KeyboardInterrupt): the bounds found so far are kept and marked interrupted."""
    inst = load_instance(SLO_CHAT)
    seen = {}

    def interrupted(instance, time_limit_s, stop, memory, exact):
        signal.raise_signal(signal.SIGINT)
        seen["stop"] = stop()
        return infermax_ceiling(instance, time_limit_s, stop, memory, exact)

    info = FAMILIES["infermax"]
    monkeypatch.setitem(FAMILIES, "infermax", type(info)(**{**info.__dict__,
                                                           "slo_ceiling": interrupted}))
    monkeypatch.setattr(workflow, "load", lambda hook: hook)
    found = policy_ceilings(inst, ["vllm", "vllm-unlimited"], 10.0)
    assert seen["stop"] is True
    assert found is not None and found.signalled and found.within_memory is not None
    assert found.ignoring_memory is None and "not computed (interrupted)" in found.note
    assert found.within_memory.method == "alone"  # the flows were not started
    assert found.within_memory.interrupted
    assert "stopped before every bound ran" in found.within_memory.sentence()


# --------------------------------------------------------------------- goodput bound

SWEEP = """
    instances:
      - name: gen
        model: infermax-llama3-8b-a100
        system: {{clients: 64}}
        requests:
          generate:
            count: 60
            seed: 3
            input: {{dist: lognormal, mean: 161, std: 161, min: 4, max: 2048}}
            output: {{dist: lognormal, mean: 60, std: 60, min: 2, max: 400}}
            arrival: {{process: poisson, rate_per_s: 1}}
        slo: {{multiple: 3}}
    grid: {{policy: [vllm, sarathi, vllm-unlimited]}}
    validate: false
    search: {{parameter: rate_per_s, low: 1, high: 3000, metric: {metric}, {target}, steps: 6}}
    """


def sweep_file(tmp_path: Path, metric: str = "attainment", target: str = "at_least: 0.9"
               ) -> Path:
    path = tmp_path / "goodput.yaml"
    path.write_text(textwrap.dedent(SWEEP.format(metric=metric, target=target)))
    return path


def test_the_goodput_bound_is_above_every_policys_goodput(tmp_path, cli):
    out = tmp_path / "out"
    report = run_sweep(load_sweep(sweep_file(tmp_path)), out, engine="serial")
    search = report.search
    assert search is not None and len(search) == 3
    for row in search.itertuples():
        assert row.note == "bisected" and row.goodput_bound is not None
        assert row.largest_rate_per_s < row.goodput_bound, row   # no schedule at or above it
        assert row.ceiling_allows_at < row.goodput_bound <= row.ceiling_allows_at * 1.02
        assert ("without the KV rule" in row.goodput_bound_note) == (
            row.policy == "vllm-unlimited")
    # one ceiling per workload and memory rule, the policies aside
    assert len(list((out / "ceilings").glob("*.json"))) == 2
    bounds = dict(zip(search["policy"], search["goodput_bound"], strict=True))
    assert bounds["vllm"] == bounds["sarathi"]
    curve = pd.read_parquet(out / "ceiling.parquet")
    assert set(curve["parameter"]) == {"rate_per_s"} and curve["workload"].nunique() == 2
    assert curve["ceiling_share"].le(curve["monotone_share"] + 1e-12).all()
    # every probe that meets the level lies below its workload's bound
    probes = report.table[report.table["probe"]]
    merged = probes.merge(search[["policy", "goodput_bound"]], on="policy")
    assert (merged.loc[merged["attainment"] >= 0.9, "rate_per_s"]
            < merged.loc[merged["attainment"] >= 0.9, "goodput_bound"]).all()
    # a re-run reuses the stored ceilings and gives the same bounds
    again = run_sweep(load_sweep(sweep_file(tmp_path)), out, engine="serial")
    assert again.ran == 0
    assert list(again.search["goodput_bound"]) == list(search["goodput_bound"])
    drawn = cli("sweep", "plot", out)
    assert drawn.exit_code == 0, drawn.output


def test_the_plot_draws_the_ceiling_beside_the_policies(tmp_path):
    from matplotlib import pyplot as plt

    from llmopt.report.sweep_plot import plot_lines

    table = pd.DataFrame({"policy": ["a", "a", "b", "b"], "rate_per_s": [1.0, 10.0, 1.0, 10.0],
                          "attainment": [1.0, 0.5, 1.0, 0.7], "cell_status": ["ok"] * 4})
    curve = pd.DataFrame({"workload": ["w"] * 3, "memory": [True] * 3,
                          "parameter": ["rate_per_s"] * 3, "rate": [1.0, 5.0, 10.0],
                          "ceiling_share": [1.0, 0.95, 0.8]})
    ax = plot_lines(table, "rate_per_s", "attainment", "policy", target=0.9, ceiling=curve)
    drawn = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert drawn["SLO ceiling: no schedule above\n(at the rates it probed)"] == [1.0, 0.95, 0.8]
    other = plot_lines(table, "rate_per_s", "attainment", "policy", ceiling=curve.assign(
        parameter="rate_scale"))  # another parameter's curve is not drawn
    assert not any("ceiling" in str(line.get_label()) for line in other.get_lines())
    plt.close("all")


@pytest.mark.parametrize(("metric", "target"), [("ttft_p99_ms", "at_most: 2000"),
                                                ("attainment", "at_least: 0.9, "
                                                               "goodput_bound: false")])
def test_no_goodput_bound_when_not_asked(tmp_path, metric, target):
    sweep = load_sweep(sweep_file(tmp_path, metric, target))
    sweep.search_groups = sweep.search_groups[:1]
    report = run_sweep(sweep, tmp_path / "out", engine="serial")
    assert report.search is not None and "goodput_bound" not in report.search
    assert not (tmp_path / "out" / "ceiling.parquet").exists()
