"""merge_run_dirs: the best verified version per op across shards, partial shards included."""

from __future__ import annotations

import json

import pytest
from rundirs import make_run_dir, plan_op

from autokernel_ci.publish.merge import RunDirError, improvements, merge_run_dirs


def _ops():
    return [plan_op("rmsnorm-0", "rmsnorm", 0.3), plan_op("softmax-0", "softmax", 0.1)]


def test_best_version_per_op_across_shards_names_its_gpu(tmp_path):
    a = make_run_dir(tmp_path / "a", _ops(), shard="1/2", gpu="NVIDIA H100", speedups={"rmsnorm-0": [1.4, 1.9]})
    b = make_run_dir(tmp_path / "b", _ops(), shard="2/2", gpu="NVIDIA H200", speedups={"rmsnorm-0": [2.6],
                                                                                      "softmax-0": [1.3]})
    merged = merge_run_dirs([a, b])
    best = {k.op_id: k for k in merged.kernels}
    assert best["rmsnorm-0"].speedup_vs_eager == pytest.approx(2.6) and best["rmsnorm-0"].gpu == "NVIDIA H200"
    assert best["softmax-0"].gpu == "NVIDIA H200" and merged.gpus == ["NVIDIA H100", "NVIDIA H200"]
    # both shards' experiments on the op (a kept and a reverted version per speedup), not their starter baselines,
    # counted as summary.json counts them
    assert (best["rmsnorm-0"].experiments, best["rmsnorm-0"].kept) == (2 * 2 + 2 * 1, 2 + 1)
    assert merged.experiments == 2 * 3 + 2 == sum(s.experiments for s in merged.shards)
    assert [s.experiments for s in merged.shards] == [json.loads((rd / "summary.json").read_text())["experiments"]
                                                      for rd in (a, b)]
    assert [k.op_id for k in merged.kernels] == ["rmsnorm-0", "softmax-0"]  # largest share first


def test_partial_shard_contributes_what_it_finished(tmp_path):
    done = make_run_dir(tmp_path / "done", _ops(), speedups={"softmax-0": [1.2]})
    killed = make_run_dir(tmp_path / "killed", _ops(), speedups={"rmsnorm-0": [1.8]}, complete=False, torn_tail=True)
    merged = merge_run_dirs([done, killed])
    shard = next(s for s in merged.shards if s.run_dir.endswith("killed"))
    assert not shard.complete and shard.torn_lines == 1
    assert next(s for s in merged.shards if s.run_dir.endswith("done")).complete
    assert {k.op_id for k in improvements(merged, 1.0)} == {"rmsnorm-0", "softmax-0"}


@pytest.mark.parametrize("tamper", ["edit_file", "failed_stage", "bad_op_id"])
def test_unverifiable_versions_are_never_published(tmp_path, tamper):
    rd = make_run_dir(tmp_path / "r", [plan_op("rmsnorm-0", "rmsnorm", 0.3)], speedups={"rmsnorm-0": [3.0]})
    journal = rd / "journal.jsonl"
    recs = [json.loads(line) for line in journal.read_text().splitlines()]
    best = max((r for r in recs if r["status"] == "kept"), key=lambda r: r["speedup_vs_eager"])
    if tamper == "edit_file":
        path = next((rd / "kernels" / "rmsnorm-0").glob(f"*_{best['source_hash']}.py"))
        path.write_text(path.read_text() + "\n# changed after verification\n")
    elif tamper == "failed_stage":
        best["stages"]["determinism"] = "fail"
    else:
        for r in recs:
            r["op_id"] = "../../etc-0"
    journal.write_text("".join(json.dumps(r) + "\n" for r in recs))
    merged = merge_run_dirs([rd])
    chosen = [k.speedup_vs_eager for k in merged.kernels]
    assert 3.0 not in chosen


def test_missing_or_foreign_run_dir_is_named(tmp_path):
    with pytest.raises(RunDirError, match="does not exist"):
        merge_run_dirs([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunDirError, match="no settings.json"):
        merge_run_dirs([tmp_path / "empty"])
    rd = make_run_dir(tmp_path / "v2", _ops())
    (rd / "settings.json").write_text(json.dumps({"version": 2}))
    with pytest.raises(RunDirError, match="version 2"):
        merge_run_dirs([rd])
