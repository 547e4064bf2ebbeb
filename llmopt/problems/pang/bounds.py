"""Lower bounds on the total inference time, each stating the time model under which it holds.

Pang et al. 2025, eqs 31–32 (the "theoretical lower bound")::

    t_p  = T^p_L · ceil(Σ_i N^p_i / N^cap_L)          (31)
    T_LB = t_p + t_d                                   (32)

with L the largest prefill level (N^cap_L tokens, T^p_L ms) and t_d the optimum of the offline
bin packing (eqs 26–30). When t_d is not proven optimal within the time limit, the bin packing's
proven bound is used instead, so that T_LB stays a lower bound.
"""

from __future__ import annotations

from llmopt.data.cost import PangLinearProfile
from llmopt.data.instance import Instance
from llmopt.errors import InstanceError
from llmopt.problems.base import Bound
from llmopt.problems.pang.binpacking import packing_data
from llmopt.problems.pang.binpacking import solve as solve_binpacking
from llmopt.progress import SILENT, Progress
from llmopt.result import Result


def largest_prefill_level(instance: Instance) -> tuple[int, float]:
    """(N^cap_L, T^p_L): the largest prefill stage allowed and its duration."""
    profile = instance.profile
    if not isinstance(profile, PangLinearProfile):
        raise InstanceError("the Pang bound needs a pang_linear profile", file=instance.label(),
                            field="model", value=profile.name)
    cap = instance.system.max_prefill_tokens or profile.max_prefill_tokens
    if cap is None:
        raise InstanceError(
            "needed for the prefill part of the bound (largest prefill level N^cap_L); "
            "set it here or in the profile", file=instance.label(),
            field="system.max_prefill_tokens",
        )
    if cap < int(instance.input_tokens.max()):
        raise InstanceError(
            f"smaller than the longest prompt ({int(instance.input_tokens.max())} tokens), "
            "which then fits no prefill stage", file=instance.label(),
            field="system.max_prefill_tokens", value=cap,
        )
    return cap, profile.prefill_stage_ms(cap)


def pang_bounds(instance: Instance, time_limit_s: float | None = 60.0,
                progress: Progress = SILENT, packing: Result | None = None) -> list[Bound]:
    """The eq 31–32 bound, and the same bound with the prefill part valid for every level set,
    from ``packing`` (a result of the bin packing, eqs 26–30) or a bin packing solved within
    ``time_limit_s``."""
    cap, t_level = largest_prefill_level(instance)
    profile: PangLinearProfile = instance.profile  # type: ignore[assignment]
    total_input = int(instance.input_tokens.sum())
    stages = -(-total_input // cap)
    t_p = t_level * stages

    if packing is None:
        progress.stage("t_d: offline bin packing (eqs 26–30)")
        packing = solve_binpacking(instance, "auto", time_limit_s, progress)
    t_d = packing.bound if packing.bound is not None else 0.0
    t_d_note = ("bin-packing optimum" if packing.status == "optimal"
                else f"bin-packing lower bound (status {packing.status}, optimum not proven)")
    detail = {"total_input_tokens": total_input, "largest_level_tokens": cap,
              "largest_level_ms": t_level, "prefill_stages": stages,
              "t_round_ms": packing_data(packing).t_round_ms, "t_d_status": packing.status,
              "t_d_source": t_d_note}
    eq32 = Bound(
        name="pang_eq32",
        value_ms=round(t_p + t_d, 6),
        equation="T_LB = t_p + t_d (eqs 31–32)",
        valid_under="stage model, prefill stages all at the largest level",
        time_model="stage-largest-level",
        why=(
            "prefill and decode stages never overlap (eqs 3–4); every client decodes its load "
            "at t_round per token (eq 8); eq 31 charges each prefill stage at the largest level "
            "T^p_L, so with smaller levels it may overstate the prefill part "
            "(see pang_eq32_levels)"
        ),
        parts={"t_p": round(t_p, 6), "t_d": t_d},
        detail=detail,
    )
    prefill = profile.prefill
    t_p_any_level = stages * prefill.overhead_ms + prefill.per_token_ms * total_input
    levels = Bound(
        name="pang_eq32_levels",
        value_ms=round(t_p_any_level + t_d, 6),
        equation="t_p' + t_d, t_p' = overhead·ceil(ΣN^p/N^cap_L) + per_token·ΣN^p",
        valid_under="stage model, any prefill levels",
        time_model="stage",
        why=(
            "with levels T^p_l = overhead + per_token·N^cap_l, at least ceil(ΣN^p/N^cap_L) "
            "non-empty prefill stages each pay the overhead and every prompt token is paid once"
        ),
        parts={"t_p": round(t_p_any_level, 6), "t_d": t_d},
        detail=detail,
    )
    return [eq32, levels, replay_rounds_bound(instance, packing.bound or 0.0,
                                              packing_data(packing).t_round_ms)]


def replay_rounds_bound(instance: Instance, t_d_ms: float, t_round_ms: float) -> Bound:
    """A bound valid under the replay engine's time model of PD competition, where a decode
    round costs overhead + per_client × (clients decoding) and a prefill stage overhead +
    per_token × tokens: every client decodes one token per round, so the rounds R are at least
    the bin-packing optimum in tokens (t_d / t_round); every output token pays per_client once;
    at least ceil(ΣN^p / P) prefill stages each pay the overhead; stages never overlap."""
    profile: PangLinearProfile = instance.profile  # type: ignore[assignment]
    cap, _ = largest_prefill_level(instance)
    total_in = int(instance.input_tokens.sum())
    total_out = int(instance.output_tokens.sum())
    rounds = round(t_d_ms / t_round_ms) if t_round_ms else 0
    decode = profile.decode.overhead_ms * rounds + profile.decode.per_client_ms * total_out
    prefill = (profile.prefill.overhead_ms * -(-total_in // cap)
               + profile.prefill.per_token_ms * total_in)
    return Bound(
        name="pd_replay_rounds",
        value_ms=round(prefill + decode, 6),
        equation="overhead_p·ceil(ΣN^p/P) + per_token·ΣN^p + overhead_d·R + per_client·ΣN^d",
        valid_under="replay model, PD competition, batch-dependent rounds",
        time_model="replay",
        why=(
            "each client decodes one token per round, so R ≥ the bin-packing optimum in tokens; "
            "each output token is paid per_client once; at least ceil(ΣN^p/P) prefill stages "
            "pay the overhead; prefill and decode iterations never overlap"
        ),
        parts={"t_p": round(prefill, 6), "t_d": round(decode, 6)},
        detail={"rounds_at_least": rounds, "total_output_tokens": total_out},
    )


def pd_bounds(instance: Instance, time_model: str, time_limit_s: float = 30.0,
              packing: Result | None = None) -> list[Bound]:
    """The closed-form bounds that hold under ``time_model`` ("stage" or "replay") for every
    schedule (``pang_bounds``; ``pd_solver_bounds`` adds the solver-based ones)."""
    return [b for b in pang_bounds(instance, time_limit_s, packing=packing)
            if b.time_model == time_model]
