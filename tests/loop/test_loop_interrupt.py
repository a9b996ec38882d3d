"""Ctrl-C and SIGTERM stop the loop between experiments: exit 130 / 143 within seconds, the journal and
summary written, no process left behind (a hung candidate's own session included), --resume goes on."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from llm_server import ScriptedLLM, Step
from loop_helpers import read_journal
from signal_helpers import RUNNER_GRACE_S, alive, collect_after_signal, descendants

from autokernel_ci.kernelfile import load
from autokernel_ci.loop.interrupt import LoopInterrupted, StopSignals
from autokernel_ci.paths import starter_kernel


# -- StopSignals, in this process ----------------------------------------------------------------------
def test_first_signal_sets_a_flag_and_wakes_the_wait_second_sigint_raises():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with StopSignals() as signals:
        assert signals.received is None
        assert select.select([signals], [], [], 0)[0] == []
        os.kill(os.getpid(), signal.SIGTERM)
        assert signals.received == "SIGTERM"
        assert select.select([signals], [], [], 1.0)[0] == [signals]  # a loop blocked in wait() wakes up
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)  # asked again: stop at once
            time.sleep(1.0)
        assert signals.received == "SIGTERM"  # the first signal names the stop
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert signals.fileno() == -1


def test_outside_the_main_thread_nothing_is_installed():
    seen: list[object] = []

    def enter() -> None:
        with StopSignals() as signals:
            seen.extend([signals.fileno(), signal.getsignal(signal.SIGTERM)])

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert seen == [-1, signal.getsignal(signal.SIGTERM)]


@pytest.mark.parametrize(("name", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_interrupted_exit_code_and_message(tmp_path, name, code):
    exc = LoopInterrupted(name, {"experiments": 4}, tmp_path)
    assert isinstance(exc, KeyboardInterrupt) and exc.exit_code == code
    message = exc.describe("to continue, rerun with --resume")
    assert message.startswith(f"stopped by {name}: 4 experiment(s) recorded in {tmp_path / 'journal.jsonl'}")
    assert message.endswith("to continue, rerun with --resume")


# -- the real CLI, signalled while a candidate hangs ------------------------------------------------------
# The LLM agent (against the scripted local server) proposes a softmax whose wrapper never returns; the
# harness would wait --timeout 300 s for it. The signal must stop the run within GitHub's 7.5 s anyway and
# kill the hung candidate, which runs in its own session where no terminal or runner signal reaches it.
HANG = "\n\ndef kernel_fn(x):  # redefined: never returns\n    while True:\n        pass\n"
LLM_MODEL = "openai/test-model"


def _cli(plan: Path, run: Path, server: ScriptedLLM, *extra: str, max_experiments: int = 40) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "autokernel_ci", "optimize", "--plan", str(plan), "--run-dir", str(run),
           "--device", "cpu", "--verify-shapes", "cpu", "--max-experiments", str(max_experiments),
           "--budget-minutes", "30", "--timeout", "300", "--agent", "llm", "--llm-model", LLM_MODEL, *extra]
    env = {**os.environ, "TRITON_INTERPRET": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "AUTOKERNEL_LLM_API_BASE": server.api_base, "AUTOKERNEL_LLM_API_KEY": "sk-test-interrupt"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)


def _signal_while_hung(proc: subprocess.Popen, server: ScriptedLLM, sig: signal.Signals, *, group: bool) -> set[int]:
    """Wait until the hanging candidate was handed out and is running, then signal; returns the processes
    below the CLI just before (the loop's worker and the harness's candidate process among them)."""
    deadline = time.time() + 180
    while time.time() < deadline:
        if server.received:
            time.sleep(4.0)  # the reply parsed, the candidate loaded and spinning in kernel_fn
            below = descendants(proc.pid)
            if group:
                os.killpg(proc.pid, sig)  # a terminal's Ctrl-C reaches the whole foreground group
            else:
                os.kill(proc.pid, sig)  # the runner signals the step's entry process only
            return below
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before the signal: {proc.stderr.read()[-2000:]}")
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("the run never asked the LLM")


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize(("sig", "group", "code"), [(signal.SIGINT, True, 130), (signal.SIGTERM, False, 143)],
                         ids=["ctrl-c-to-the-group", "sigterm-to-the-main-process"])
def test_signal_stops_a_hung_experiment_and_resume_goes_on(tmp_path, plan_file, sig, group, code):
    plan = plan_file((("softmax-0", "softmax", 0.5),))
    run = tmp_path / "run"
    starter = load(starter_kernel("softmax"))
    good = starter.with_config({**starter.config, "num_warps": 2}).source
    with ScriptedLLM() as server:
        server.script = [Step(f"IDEA: spin\n```python\n{starter.source}{HANG}```"),
                         Step(f"IDEA: two warps\n```python\n{good}```")]
        proc = _cli(plan, run, server)
        below = _signal_while_hung(proc, server, sig, group=group)
        out, err, stop_s = collect_after_signal(proc, "the loop")
        deadline = time.time() + 10
        while any(alive(p) for p in below) and time.time() < deadline:
            time.sleep(0.1)
        left = [p for p in below if alive(p)]
        for pid in left:  # clean up before failing: a spinning process would slow the rest of the suite
            os.kill(pid, signal.SIGKILL)
        assert proc.returncode == code, err[-3000:]
        assert stop_s < RUNNER_GRACE_S, f"took {stop_s:.1f} s to stop: {err[-3000:]}"
        assert len(below) >= 2, below  # the loop's worker and the harness's candidate process were running
        assert not left, "a worker or the hung candidate outlived the run"
        assert "Traceback" not in err, err[-3000:]
        assert f"stopped by {sig.name}" in err and "--resume" in err

        records = read_journal(run)
        assert [r["n"] for r in records] == [0]  # the baseline; the hung experiment dropped, not a false timeout
        summary = json.loads((run / "summary.json").read_text())
        assert summary["finished"] is False  # publish's merge calls such a shard incomplete
        assert summary["stopped"].startswith(f"interrupted by {sig.name} with 1 experiment(s) in flight")
        assert f"stopped: interrupted by {sig.name}" in out

        again = _cli(plan, run, server, "--resume", max_experiments=1)
        out2, err2 = again.communicate(timeout=300)
    assert again.returncode == 0, err2[-3000:]
    resumed = read_journal(run)
    assert resumed[:1] == records and [r["n"] for r in resumed] == [0, 1]
    assert resumed[1]["idea"] == "two warps" and resumed[1]["status"] in ("kept", "reverted")
    assert json.loads((run / "summary.json").read_text())["finished"] is True
