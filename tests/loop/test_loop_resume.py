"""kill -9 the CLI mid-run at several points, resume, and check nothing is lost or counted twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loop_helpers import read_journal

from autokernel_ci.kernelfile import source_hash

MAX_EXPERIMENTS = 5


def _cli(plan: Path, run: Path, *extra: str) -> subprocess.Popen:
    # autokernel-ci optimize's handler, with the loop options cli.py may not declare yet (--verify-shapes)
    cmd = [sys.executable, "-m", "autokernel_ci.loop.commands", "--plan", str(plan), "--run-dir", str(run),
           "--device", "cpu", "--verify-shapes", "cpu", "--max-experiments", str(MAX_EXPERIMENTS),
           "--budget-minutes", "30",
           # every candidate verified: a timed-only experiment takes ~0.1 s on CPU, over before a kill could land in it
           "--verify-every", *extra]
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)  # its own process group: workers die with it


def _kill_when(proc: subprocess.Popen, run: Path, records: int, delay_s: float) -> None:
    deadline = time.time() + 150
    while time.time() < deadline:
        path = run / "journal.jsonl"
        if path.exists() and len(path.read_text().splitlines()) >= records:
            time.sleep(delay_s)  # land somewhere inside the next experiment
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before it could be killed: {proc.stderr.read()[-2000:]}")
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("the run made no progress")


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_kill_and_resume_loses_nothing_and_counts_nothing_twice(tmp_path, plan_file):
    plan = plan_file((("rmsnorm-0", "rmsnorm", 0.5),))
    run = tmp_path / "run"

    first = _cli(plan, run)
    _kill_when(first, run, records=2, delay_s=1.5)  # baseline + 1 experiment, killed mid-experiment 2
    after_first = read_journal(run)
    assert [r["n"] for r in after_first][:2] == [0, 1]

    second = _cli(plan, run, "--resume")
    _kill_when(second, run, records=len(after_first) + 1, delay_s=0.0)  # killed right after a commit
    # a kill in the middle of a journal write leaves a torn line; the next resume must drop it
    with open(run / "journal.jsonl", "a") as fh:
        fh.write('{"n": 99, "op_id": "rmsnorm-0", "sta')

    third = _cli(plan, run, "--resume")
    out, err = third.communicate(timeout=300)
    assert third.returncode == 0, err[-3000:]
    assert "half-written last line" in err
    assert "resuming after experiment" in out

    records = read_journal(run)
    ns = [r["n"] for r in records]
    assert ns == list(range(0, MAX_EXPERIMENTS + 1))  # numbering continues, no gap, no duplicate, no n=99
    assert sum(1 for r in records if r["n"] >= 1) == MAX_EXPERIMENTS  # the budget was not counted twice
    assert records[: len(after_first)] == after_first  # committed records are never rewritten
    elapsed = [r["elapsed_s"] for r in records]
    assert elapsed == sorted(elapsed)
    hashes = [r["source_hash"] for r in records]
    assert len(hashes) == len(set(hashes))  # no point measured twice across the kills

    kept = {(r["n"], r["source_hash"]) for r in records if r["status"] == "kept"}
    files = sorted((run / "kernels" / "rmsnorm-0").glob("*.py"))
    assert {(int(f.stem[:4]), f.stem[5:]) for f in files} == kept  # no orphan, no duplicate kept version
    best = max(kept)
    assert source_hash((run / "best" / "rmsnorm-0.py").read_text()) == best[1]

    summary = json.loads((run / "summary.json").read_text())
    assert summary["experiments"] == MAX_EXPERIMENTS and summary["finished"]
    assert summary["ops"]["rmsnorm-0"]["best_n"] == best[0]
    assert len((run / "results.tsv").read_text().splitlines()) == len(records) + 1
    settings = json.loads((run / "settings.json").read_text())
    assert len(settings["sessions"]) == 2
