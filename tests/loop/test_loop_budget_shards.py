"""Budget decisions and plan sharding."""

from __future__ import annotations

import pytest

from autokernel_ci.loop.budget import Budget, BudgetUse, stop_reason
from autokernel_ci.loop.shards import ShardError, assign, parse_shard, saveable_fraction, split_plan
from autokernel_ci.plan import Plan, PlanOp
from autokernel_ci.specs import KERNEL_TYPES


def test_no_bound_reached():
    assert stop_reason(Budget(minutes=10), BudgetUse(), 0.0) is None


def test_experiment_bound_counts_in_flight():
    use = BudgetUse(experiments=3)
    assert stop_reason(Budget(minutes=None, experiments=5), use, 0.0, in_flight=1) is None
    assert "max experiments" in stop_reason(Budget(minutes=None, experiments=5), use, 0.0, in_flight=2)


def test_usd_bound():
    use = BudgetUse(usd=1.01)
    assert "USD" in stop_reason(Budget(minutes=None, usd=1.0), use, 0.0)


def test_does_not_start_an_experiment_that_would_overrun():
    use = BudgetUse(durations=[10.0] * 8)  # predicted 13 s with the safety factor
    assert stop_reason(Budget(minutes=1), use, 40.0) is None
    reason = stop_reason(Budget(minutes=1), use, 50.0)
    assert reason and "would overrun" in reason
    assert "time budget reached" in stop_reason(Budget(minutes=1), use, 61.0)


def test_negative_budget_is_refused():
    with pytest.raises(ValueError, match="negative"):
        Budget(minutes=-1)


def _plan(n_ops: int) -> Plan:
    ops = []
    for i in range(n_ops):
        kind = KERNEL_TYPES[i % len(KERNEL_TYPES)]
        share = 0.3 / (i + 1)
        ops.append(PlanOp(id=f"{kind}-{i}", kernel_type=kind, name=kind, shapes=[{}], dtype="bf16", calls=1,
                          time_us=100.0 * share, share=share, bound="memory", floor_us=20.0 * share,
                          amdahl_gain=1.0 / (1.0 - share * 0.8)))
    ops.append(PlanOp(id="other-0", kernel_type="other", name="aten::cat", shapes=[], dtype="bf16", calls=1,
                      time_us=1.0, share=0.01, bound="unknown", floor_us=None, amdahl_gain=1.0))
    return Plan(model="m.py:f", dtype="bf16", device="cuda", ops=ops)


@pytest.mark.parametrize("n_ops,n_shards", [(1, 1), (5, 2), (9, 3), (12, 4), (3, 5)])
def test_shards_partition_the_targets_exactly(n_ops, n_shards):
    plan = _plan(n_ops)
    parts = [split_plan(plan, k, n_shards) for k in range(1, n_shards + 1)]
    ids = [op.id for p in parts for op in p.ops]
    assert sorted(ids) == sorted(op.id for op in plan.targets())
    assert len(ids) == len(set(ids))
    assert parts == [split_plan(plan, k, n_shards) for k in range(1, n_shards + 1)]  # deterministic


def test_shards_balance_expected_gain():
    plan = _plan(12)
    totals = [sum(saveable_fraction(o) for o in shard) for shard in assign(plan.targets(), 3)]
    biggest = max(saveable_fraction(o) for o in plan.targets())
    assert max(totals) - min(totals) <= biggest  # LPT: the gap is at most one op


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/0", "a/b", "1", "1/2/3", "-1/2", ""])
def test_bad_shard_values_are_named(text):
    with pytest.raises(ShardError, match="shard"):
        parse_shard(text)


def test_parse_shard():
    assert parse_shard("2/4") == (2, 4)
