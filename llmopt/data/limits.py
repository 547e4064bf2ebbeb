"""System limits resolved once from an instance's ``system`` and its cost profile.

The instance's ``system`` fields win; a profile may carry defaults (the Pang profile its KV
cache and largest prefill stage, the InferMax profiles M and C). Every engine, model and the
solution checks read the limits from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmopt.data.instance import Instance
from llmopt.data.prefix import DEFAULT_BLOCK_SIZE


@dataclass(frozen=True)
class Limits:
    """Per model instance: ``clients`` J (requests running at once), ``kv_tokens`` M,
    ``batch_tokens`` C (tokens one iteration may process), ``prefill_tokens`` P (prompt tokens
    one prefill stage or batch may take). None: no limit given."""

    clients: int
    kv_tokens: int | None
    batch_tokens: int | None
    prefill_tokens: int | None


def resolve_limits(instance: Instance) -> Limits:
    system, profile = instance.system, instance.profile
    cache = getattr(profile, "kv", None)
    kv = (system.kv_capacity or getattr(profile, "kv_capacity", None)
          or (cache.tokens if cache is not None else None))
    return Limits(
        clients=system.clients,
        kv_tokens=kv,
        batch_tokens=system.max_batch_tokens or getattr(profile, "max_batch_tokens", None),
        prefill_tokens=system.max_prefill_tokens or getattr(profile, "max_prefill_tokens", None),
    )


def block_size(instance: Instance) -> int:
    """The prefix cache's KV block (tokens): ``system.block_size``, else the profile's
    (``kv.block_size``, Pang et al.'s Ascend profile), else vLLM's default of 16."""
    cache = getattr(instance.profile, "kv", None)
    return int(instance.system.block_size or getattr(cache, "block_size", None)
               or DEFAULT_BLOCK_SIZE)
