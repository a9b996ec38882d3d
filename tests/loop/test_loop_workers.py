"""Parallel workers: two workers on one device serialise their timing; a dead worker is replaced."""

from __future__ import annotations

import os
import signal
import time

import pytest

from autokernel_ci.loop.workers import WorkerPool, plan_slots
from autokernel_ci.paths import starter_kernel


def test_slots_one_per_gpu_and_shared_locks():
    slots = plan_slots("cuda", None, [0, 1, 2])
    assert [s.lock_id for s in slots] == ["cuda0", "cuda1", "cuda2"] and slots[2].gpu_index == 2
    extra = plan_slots("cuda", 4, [0, 1])
    assert [s.lock_id for s in extra] == ["cuda0", "cuda1", "cuda0", "cuda1"]
    assert len({s.label for s in extra}) == 4
    assert [s.lock_id for s in plan_slots("cpu", 3)] == ["cpu0", "cpu1", "cpu2"]
    with pytest.raises(RuntimeError, match="no GPU is visible"):
        plan_slots("cuda", None, [])


@pytest.mark.timeout(240)
def test_a_worker_that_dies_is_replaced(tmp_path):
    slots = plan_slots("cpu", 1)
    pool = WorkerPool(slots, lock_dir=tmp_path / "locks", evaluator_ref="autokernel_ci.harness:Evaluator",
                      timeout_s=120.0)
    source = starter_kernel("rmsnorm").read_text()
    kwargs = {"verify_shape_sets": ("cpu",), "extra_shapes": (), "bench_shapes": [{"M": 16, "N": 256}],
              "dtype": "fp32", "baselines": False}
    try:
        pool.start()
        victim = pool.workers[0].process.pid
        pool.submit(pool.workers[0], "task-1", source, kwargs)
        time.sleep(0.5)
        os.kill(victim, signal.SIGKILL)
        done = pool.wait(timeout=60)
        assert len(done) == 1 and done[0].task == "task-1" and done[0].payload.get("died")
        assert "replaced" in done[0].payload["error"]
        assert pool.replaced == 1 and pool.workers[0].process.pid != victim
        pool.submit(pool.free()[0], "task-2", source, kwargs)
        done = []
        while not done:
            done = pool.wait(timeout=120)
        assert done[0].task == "task-2" and done[0].payload["verdict"]["status"] == "pass"
    finally:
        pool.close()
