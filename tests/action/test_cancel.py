"""A cancelled workflow: the runner sends SIGINT to the step's entry process (action.yml execs Python in the
shell's place), then SIGTERM 7.5 s later. The real entrypoint, mid-optimisation on the bundled example,
must stop inside that window, publish nothing, and say so in its outputs, log and job summary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ghworld import REPO, TOKEN
from signal_helpers import RUNNER_GRACE_S, collect_after_signal

REPO_ROOT = Path(__file__).resolve().parents[2]


def _journal_lines(workspace: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in workspace.glob(".autokernel-ci/runs/*/journal.jsonl"))


def test_action_yml_execs_python_so_it_gets_the_runners_signal():
    run_line = next(line.strip() for line in (REPO_ROOT / "action.yml").read_text().splitlines()
                    if line.strip().startswith("run:") and "autokernel_ci action" in line)
    assert run_line == "run: 'exec \"$AUTOKERNEL_PYTHON\" -m autokernel_ci action'"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cancelled_run_stops_in_time_and_publishes_nothing(world):
    event = world.tmp / "event-schedule.json"
    event.write_text(json.dumps({"schedule": "0 3 * * *", "repository": {"full_name": REPO}}))
    env = world.env("schedule", event, example="llama", device="cpu", top="1", max_experiments="40",
                    budget_minutes="30")
    proc = subprocess.Popen([sys.executable, "-m", "autokernel_ci", "action"], cwd=world.workspace, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.time() + 240
    while _journal_lines(world.workspace) < 2:  # the starter's baseline and one experiment
        if proc.poll() is not None or time.time() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"no experiment before the deadline: {proc.communicate()[0][-3000:]}")
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGINT)  # the runner's first step of a cancellation
    log, _, stop_s = collect_after_signal(proc, "the action")
    assert stop_s < RUNNER_GRACE_S, f"took {stop_s:.1f} s: the runner would have sent SIGTERM"
    assert proc.returncode == 130, log[-3000:]
    out = world.outputs()
    assert out["operation"] == "cancelled", out
    run_dir = Path(out["run-dir"])
    assert (run_dir / "journal.jsonl").is_file()
    assert json.loads((run_dir / "summary.json").read_text())["finished"] is False
    assert "::error::stopped by SIGINT" in log and "nothing was published" in log
    assert "Traceback" not in log, log[-3000:]
    assert "## autokernel-ci: cancelled" in (world.tmp / "summary.md").read_text()
    assert world.api.pulls == []  # no PR opened
    assert world.remote_sha("refs/heads/autokernel/nightly") is None  # no branch pushed
    assert TOKEN not in log.replace(f"::add-mask::{TOKEN}", "")
