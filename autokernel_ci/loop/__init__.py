"""The bounded agent loop: orchestrator, journal, budget, shards, workers (docs/loop.md)."""

from autokernel_ci.loop.budget import Budget
from autokernel_ci.loop.orchestrator import LoopSettings, optimize
from autokernel_ci.loop.shards import parse_shard, split_plan

__all__ = ["Budget", "LoopSettings", "optimize", "parse_shard", "split_plan"]
