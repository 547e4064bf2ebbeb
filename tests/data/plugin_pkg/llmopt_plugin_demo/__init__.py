"""llmopt extended from outside: a scheduler, a router, a problem and a trace format.

Registered through the entry points of this package's ``pyproject.toml``; after ``pip install``,
``llmopt list`` shows them and every command runs them by name."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from llmopt.data.trace_formats import TraceFormat
from llmopt.policies.base import IterationPolicy, Steady
from llmopt.policies.deploy import per_replica
from llmopt.policies.registry import PolicyInfo, RouterInfo
from llmopt.problems.registry import ProblemInfo
from llmopt.result import Result
from llmopt.validate.claims import Evidence


# --- a scheduler: shortest prompt first, never preempting -------------------------------------
class ShortestPromptFirst(IterationPolicy):
    name = "shortest-prompt-first"

    def priority_keys(self, instance):
        return instance.input_tokens.astype(float)    # the waiting queue's order

    def reservation(self, replica, i):
        return replica.I[i] + replica.O[i] - 1         # the whole request: never evicted

    def next_batch(self, replica):
        b = replica.new_batch(replica.C, replica.C)
        for rank in list(replica.waiting):
            i = replica.by_rank[rank]
            need, prompt = self.reservation(replica, i), replica.S[i] - replica.m[i]
            if replica.n_running >= replica.J or need > b.free or prompt > b.tokens:
                break
            replica.take_waiting(i)
            replica.admit(i, prompt, need, b)
        if replica.n_decoders():
            b.add_all_decodes(replica.n_decoders())
        return None if b.empty else b

    def steady(self, replica, batch):
        return Steady(math.inf, until_arrival=True)    # nothing changes until an arrival


SHORTEST_PROMPT_FIRST = PolicyInfo(
    "shortest-prompt-first", "infermax", "llmopt-plugin-demo", "its README",
    "waiting requests by prompt length, each reserving I + O - 1 KVs (never evicted)",
    deploy=per_replica(ShortestPromptFirst))


# --- a router: the replica with the fewest requests running ---------------------------------
class FewestRunning:
    name = "fewest-running"
    reads_state = True

    def route(self, request, now, replicas):
        return min(range(len(replicas)), key=lambda k: (replicas[k].n_running, k))


FEWEST_RUNNING = RouterInfo("fewest-running", "the replica with the fewest requests running",
                            FewestRunning)


# --- a problem: serve the requests one after another on one client -------------------------
def one_at_a_time(instance, solver="auto", time_limit_s=None, progress=None):
    """Pang's profile, requests in order, one at a time: one schedule, so it is optimal."""
    p = instance.profile
    total = sum(p.prefill_stage_ms(r.input_tokens) + r.output_tokens * p.decode_round_ms(1)
                for r in instance.requests)
    return Result("one-at-a-time", solver, "optimal", round(total, 6), round(total, 6), 0.0,
                  time_limit_s, "llmopt-plugin-demo 0.1.0", proof="only one schedule exists",
                  data={"order": list(instance.ids)})


def check_one_at_a_time(instance, sol, verdict):
    """The total recomputed from the instance, independently of the solver."""
    p = instance.profile
    if sol.get("order") != list(instance.ids):
        verdict.reasons.append("order must list every request once, in the instance's order")
    total = sum(p.prefill_stage_ms(r.input_tokens) + r.output_tokens * p.decode_round_ms(1)
                for r in instance.requests)
    return Evidence(objective=total, schedules=[("the one schedule", total)], optimum=total,
                    exact_method="recomputed")


ONE_AT_A_TIME = ProblemInfo(
    "one-at-a-time", "pang_linear", "llmopt-plugin-demo", "—",
    "requests served one by one on one client (a toy)", ("auto",),
    solve=one_at_a_time, check=check_one_at_a_time)


# --- a trace format: one request per line, "input output arrival_ms" --------------------------
def read_plain(path: Path, selection) -> pd.DataFrame:
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return pd.DataFrame({"id": [f"p{k}" for k in range(len(rows))],
                         "input_tokens": [int(r[0]) for r in rows],
                         "output_tokens": [int(r[1]) for r in rows],
                         "arrival_ms": [float(r[2]) for r in rows]})


PLAIN = TraceFormat("plain", "llmopt-plugin-demo", "input output arrival_ms per line",
                    read_plain)
