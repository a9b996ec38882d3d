import json

import pytest

from autokernel_ci.plan import Plan, PlanError, PlanOp


def _plan():
    ops = [
        PlanOp("rmsnorm-0", "rmsnorm", "rms", [{"M": 8, "N": 16}], "bf16", 4, 10.0, 0.1, "memory", 2.0, 1.08),
        PlanOp("matmul-0", "matmul", "mm", [{"M": 8, "K": 16, "N": 16}], "bf16", 8, 60.0, 0.6, "compute", 50.0, 1.11),
        PlanOp("other-0", "other", "aten::gelu", [], "bf16", 4, 30.0, 0.3, "unknown", None, 1.0),
    ]
    return Plan(model="m.py:build", dtype="bf16", device="cpu", ops=ops, model_time_us=100.0, profiled_time_us=100.0)


def test_round_trip_and_targets(tmp_path):
    path = tmp_path / "plan.json"
    _plan().save(path)
    plan = Plan.load(path)
    assert plan == _plan()
    assert [o.id for o in plan.targets()] == ["matmul-0", "rmsnorm-0"]
    assert plan.op("rmsnorm-0").calls == 4


def test_errors_name_the_fix(tmp_path):
    with pytest.raises(PlanError, match="autokernel-ci profile --json"):
        Plan.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PlanError, match="not JSON"):
        Plan.load(bad)
    bad.write_text(json.dumps({**_plan().to_dict(), "version": 99}))
    with pytest.raises(PlanError, match="version 99 is not 1"):
        Plan.load(bad)
    with pytest.raises(KeyError, match="plan has no op 'x'"):
        _plan().op("x")
