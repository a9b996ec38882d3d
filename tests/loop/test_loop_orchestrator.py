"""The loop end to end on CPU with the real harness (Triton interpreter, cpu shapes)."""

from __future__ import annotations

import json

import pytest
from loop_helpers import make_plan, read_journal

from autokernel_ci.kernelfile import parse, source_hash
from autokernel_ci.loop import Budget, LoopSettings, optimize
from autokernel_ci.loop.journal import kept_version_path
from autokernel_ci.paths import starter_kernel

OP_KEYS = {"best_file", "kernel_type", "backend", "shapes", "dtype", "share", "starter_us", "best_us", "p20_us",
           "p80_us", "eager_us", "compile_us", "speedup_vs_starter", "speedup_vs_eager", "speedup_vs_compile",
           "pct_of_ceiling", "metric", "value", "stages", "experiments", "kept", "status"}
TOP_KEYS = {"version", "gpu", "agent", "experiments", "elapsed_s", "usd", "stopped", "finished", "ops", "budget"}


def _settings(**kw) -> LoopSettings:
    return LoopSettings(**{"device": "cpu", "verify_shape_sets": ("cpu",), "quiet": True, "timeout_s": 120.0,
                           **kw})


@pytest.mark.timeout(300)
def test_two_ops_three_experiments_on_two_workers_sharing_a_device(tmp_path):
    run = tmp_path / "run"
    settings = _settings(budget=Budget(minutes=None, experiments=3), workers=2, gpu_indices=[0, 0])
    summary = optimize(make_plan(), run, settings)
    records = read_journal(run)
    assert [r["n"] for r in records] == [0, 0, 1, 2, 3]
    # two workers on one device id: both worked, and their timed windows never overlap (per-device lock)
    assert {r["slot"] for r in records} == {"cpu0#0", "cpu0#1"}
    windows = sorted(tuple(r["window"]) for r in records)
    for (_, end), (start, _) in zip(windows, windows[1:], strict=False):
        assert start >= end, f"timed windows overlap: {windows}"
    assert {r["op_id"] for r in records[:2]} == {"rmsnorm-0", "softmax-0"}
    assert all(r["status"] == "kept" and r["idea"] == "starter" for r in records[:2])
    assert all(set(r["stages"].values()) == {"pass"} for r in records[:2])
    # every experiment is a new point of its op's SEARCH_SPACE, proposed by the search agent
    for r in records[2:]:
        assert r["agent"] == "search" and r["config"] and r["status"] in ("kept", "reverted", "rejected"), \
            f"experiment {r['n']} {r['op_id']} {r['config']}: {r['status']}: {r.get('reason', '')[:2000]}"
    assert len({(r["op_id"], r["source_hash"]) for r in records}) == len(records)
    # files: kept versions, best, summary, tsv, settings, plot
    for r in records:
        path = kept_version_path(run, r["op_id"], r["n"], r["source_hash"])
        assert path.exists() == (r["status"] == "kept")
        if path.exists():
            assert source_hash(path.read_text()) == r["source_hash"]
            assert json.loads(path.with_suffix(".json").read_text())["verdict"]["status"] == "pass"
    assert (run / "best" / "rmsnorm-0.py").exists() and (run / "progress.png").stat().st_size > 1000
    assert len((run / "results.tsv").read_text().splitlines()) == len(records) + 1
    assert json.loads((run / "settings.json").read_text())["budget"]["experiments"] == 3
    on_disk = json.loads((run / "summary.json").read_text())
    assert on_disk["experiments"] == summary["experiments"] == 3
    assert TOP_KEYS <= set(summary) and summary["finished"] and "max experiments" in summary["stopped"]
    for op in summary["ops"].values():
        assert OP_KEYS <= set(op)
        assert op["starter_us"] > 0 and op["best_us"] <= op["starter_us"] * 1.0001
        assert op["eager_us"] > 0 and op["metric"] == "GB/s"
        best = (run / op["best_file"]).read_text()
        assert source_hash(best) == op["source_hash"]
        assert parse(best).kernel_type == op["kernel_type"]
    assert sum(op["experiments"] for op in summary["ops"].values()) == 3


@pytest.mark.timeout(240)
def test_time_budget_stops_within_one_experiment(tmp_path):
    run = tmp_path / "run"
    budget_s = 20.0
    summary = optimize(make_plan(DEFAULT_ONE), run, _settings(budget=Budget(minutes=budget_s / 60)))
    records = read_journal(run)
    longest = max(r["duration_s"] for r in records)
    assert summary["stopped"] and ("time budget" in summary["stopped"] or "overrun" in summary["stopped"])
    assert records[-1]["elapsed_s"] <= budget_s + longest
    assert summary["finished"] and summary["ops"]["rmsnorm-0"]["best_us"] is not None


DEFAULT_ONE = (("rmsnorm-0", "rmsnorm", 0.5),)


@pytest.mark.timeout(120)
def test_a_starter_that_fails_marks_the_op_failed(tmp_path, monkeypatch):
    broken = tmp_path / "kernels" / "triton"
    broken.mkdir(parents=True)
    source = starter_kernel("rmsnorm").read_text().replace("rstd = 1.0 / tl.sqrt(", "rstd = 2.0 / tl.sqrt(")
    (broken / "rmsnorm.py").write_text(source)
    monkeypatch.setattr("autokernel_ci.loop.orchestrator.starter_kernel",
                        lambda kind, backend="triton": broken / f"{kind}.py")
    summary = optimize(make_plan(DEFAULT_ONE), tmp_path / "run", _settings(budget=Budget(experiments=2)))
    op = summary["ops"]["rmsnorm-0"]
    assert op["status"] == "failed" and op["best_us"] is None and op["reason"]
    assert summary["experiments"] == 0 and "no op has a starter" in summary["stopped"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("decide_ref", "screen", "status", "stages"), [
    pytest.param("loop_helpers:never_better", True, "reverted", {"not_run"}, id="screened-out-unverified"),
    pytest.param("loop_helpers:never_better", False, "reverted", {"pass"}, id="verify-every"),
    pytest.param("loop_helpers:always_better", True, "kept", {"pass"}, id="screened-in-verified"),
])
def test_search_candidates_are_timed_first_and_verified_only_if_kept(tmp_path, decide_ref, screen, status, stages):
    run = tmp_path / "run"
    summary = optimize(make_plan(DEFAULT_ONE), run,
                       _settings(budget=Budget(experiments=3), decide=decide_ref, screen=screen))
    baseline, *experiments = read_journal(run)
    assert set(baseline["stages"].values()) == {"pass"}  # a starter is always verified
    assert len(experiments) == 3 and summary["experiments"] == 3
    for r in experiments:
        assert r["agent"] == "search" and r["status"] == status, r["reason"]
        assert set(r["stages"].values()) == stages and r["median_us"] > 0
        assert r["reason"].startswith("not verified: slower") == (stages == {"not_run"}), r["reason"]
        assert kept_version_path(run, r["op_id"], r["n"], r["source_hash"]).exists() == (status == "kept")
    best = summary["ops"]["rmsnorm-0"]
    assert set(best["stages"].values()) == {"pass"}  # what a run reports as best was verified, screened or not


@pytest.mark.timeout(300)
def test_a_slow_baseline_does_not_keep_the_first_experiment_from_starting(tmp_path):
    # A baseline times eager and torch.compile and compiles cold (~30 s for the H100's matmul) where a screened
    # experiment took 0.7-2.3 s: predicting from it left a 0.75 min budget no experiment at all.
    run = tmp_path / "run"
    optimize(make_plan(DEFAULT_ONE), run, _settings(budget=Budget(minutes=None, experiments=0)))
    journal = run / "journal.jsonl"
    (baseline,) = read_journal(run)
    baseline["duration_s"] = 10_000.0  # far beyond the whole budget below
    journal.write_text(json.dumps(baseline) + "\n")
    summary = optimize(make_plan(DEFAULT_ONE), run, _settings(budget=Budget(minutes=1, experiments=2)), resume=True)
    assert summary["experiments"] == 2, summary["stopped"]
    assert [r["n"] for r in read_journal(run)] == [0, 1, 2]


@pytest.mark.timeout(300)
def test_a_keep_against_a_stale_best_is_retimed_before_it_is_kept(tmp_path):
    # The best's record claims 1e6 times what it takes (drift between timings, made extreme): the first candidate
    # beats it by 100x on paper. Re-timed in turn, the starter and its CONFIG point run alike: not kept (with
    # confirm_pairs 0 it would be, on its first timing). The next candidate then faces the re-timed best, not the
    # stale record: screened out, never verified or re-timed.
    run = tmp_path / "run"
    optimize(make_plan(DEFAULT_ONE), run, _settings(budget=Budget(minutes=None, experiments=0)))
    (baseline,) = read_journal(run)
    for key in ("median_us", "p20_us", "p80_us"):
        baseline[key] *= 1e6
    (run / "journal.jsonl").write_text(json.dumps(baseline) + "\n")
    settings = _settings(budget=Budget(experiments=2), decide="loop_helpers:hundred_times_faster")
    assert settings.confirm_pairs == 2  # the default
    summary = optimize(make_plan(DEFAULT_ONE), run, settings, resume=True)
    _, first, second = read_journal(run)
    assert [first["status"], second["status"]] == ["reverted", "reverted"], [first["decision"], second["decision"]]
    assert set(first["stages"].values()) == {"pass"}  # screened in against the stale best, then verified
    assert first["confirm"]["confirmed"] is False and len(first["confirm"]["pairs"]) == 2
    assert "; not confirmed in turn (pair 1 of 2)" in first["decision"], first["decision"]
    retimed = first["confirm"]["best"]
    assert retimed["median_us"] == pytest.approx(min(b for b, _ in first["confirm"]["pairs"]), abs=1e-3)
    for best_us, candidate_us in first["confirm"]["pairs"]:
        assert 0 < best_us < baseline["median_us"] / 100 and candidate_us > 0  # the best re-timed, not read back
    assert set(second["stages"].values()) == {"not_run"} and "confirm" not in second  # against the re-timed best
    assert second["speedup_vs_best"] < 100, second["decision"]
    assert summary["ops"]["rmsnorm-0"]["best_us"] == baseline["median_us"]  # the starter stays the best
