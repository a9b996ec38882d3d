"""Split a plan's targets across N shards (GitHub Actions matrix jobs), balancing expected gain.

An op's expected gain is the fraction of model time it can save if it reaches its roofline floor,
1 - 1/amdahl_gain (= share x (1 - floor/time)); unlike the speedups these fractions add up across
ops, so a shard's total is meaningful. Longest-processing-time greedy: ops by saveable fraction,
largest first, each to the shard with the least total so far (ties to the lowest shard, then by op
id), which is within 4/3 of the best possible balance and fully deterministic.
"""

from __future__ import annotations

import dataclasses

from autokernel_ci.plan import Plan, PlanOp


class ShardError(ValueError):
    pass


def parse_shard(text: str) -> tuple[int, int]:
    """'K/N' (1-based) -> (k, n); the error names the value and the form expected."""
    parts = str(text).split("/")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ShardError(f"--shard {text!r} is not K/N: write it as two positive integers, e.g. --shard 1/4")
    k, n = (int(p) for p in parts)
    if n < 1 or not 1 <= k <= n:
        raise ShardError(f"--shard {text!r}: K must be between 1 and N (N >= 1), e.g. --shard 1/{max(n, 1)}")
    return k, n


def saveable_fraction(op: PlanOp) -> float:
    """Fraction of model time the op could save at its floor (0 when unknown or already at it)."""
    if op.amdahl_gain and op.amdahl_gain > 1.0:
        return 1.0 - 1.0 / op.amdahl_gain
    if op.floor_us and op.time_us > 0:
        return max(0.0, op.share * (1.0 - op.floor_us / op.time_us))
    return max(0.0, op.share) * 0.5  # no floor known: assume half of the op's time can go


def assign(targets: list[PlanOp], n: int) -> list[list[PlanOp]]:
    """Every target in exactly one of n shards, balanced by saveable fraction."""
    if n < 1:
        raise ShardError(f"shard count {n} must be >= 1")
    shards: list[list[PlanOp]] = [[] for _ in range(n)]
    totals = [0.0] * n
    for op in sorted(targets, key=lambda o: (-saveable_fraction(o), o.id)):
        i = min(range(n), key=lambda j: (totals[j], len(shards[j]), j))
        shards[i].append(op)
        totals[i] += saveable_fraction(op)
    return shards


def split_plan(plan: Plan, k: int, n: int) -> Plan:
    """Shard k (1-based) of n: the plan with only that shard's targets (may be empty when n > targets)."""
    if n < 1 or not 1 <= k <= n:
        raise ShardError(f"shard {k}/{n}: K must be between 1 and N (N >= 1)")
    mine = {op.id for op in assign(plan.targets(), n)[k - 1]}
    return dataclasses.replace(plan, ops=[op for op in plan.ops if op.id in mine])
