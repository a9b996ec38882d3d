"""Faults: crash, hang, OOM, compile error, contract error, process death; the worker is replaced
and the next candidate runs normally. Secrets in the parent never reach the candidate."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from harness_testlib import EXPLOITS, FIXTURES, source
from signal_helpers import alive, children

from autokernel_ci import kernelfile
from autokernel_ci.harness import Evaluator
from autokernel_ci.harness.results import Status

FAULTS = {
    "fault_raises.py": Status.CRASH,
    "fault_oom.py": Status.OOM,
    "fault_compile_error.py": Status.COMPILE_ERROR,
    "fault_syntax_error.txt": Status.INVALID,  # .txt: ruff must not parse it
    "fault_contract.py": Status.INVALID,
    "fault_exit.py": Status.CRASH,
    "fault_segfault.py": Status.CRASH,
}


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_then_honest_kernel_in_the_same_evaluator(evaluator, name):
    text = source(EXPLOITS / name)
    verdict = evaluator.verify_source(text, dtypes=["float32"], label=name)
    assert verdict.status is FAULTS[name], verdict.reason
    assert verdict.reason
    # the candidate's own hash even when it does not parse (it was the empty string's for every contract error)
    assert verdict.source_hash == kernelfile.source_hash(text)
    if FAULTS[name] is Status.INVALID:
        assert f"contract: {name}: " in verdict.reason  # names the file, not "<kernel source>"
    if name == "fault_raises.py":
        assert "deliberate failure inside kernel_fn" in verdict.reason and "Traceback" in verdict.reason
    if name in ("fault_exit.py", "fault_segfault.py"):
        assert ("SIGSEGV" in verdict.reason) == (name == "fault_segfault.py")
        assert "replaced" in verdict.reason
    honest = evaluator.verify_source(source(FIXTURES / "softmax_honest.py"), dtypes=["float32"])
    assert honest.passed, honest.reason


SECRETS = {"GITHUB_TOKEN": "ghp_x", "GH_TOKEN": "x", "OPENAI_API_KEY": "sk-x", "ANTHROPIC_API_KEY": "x",
           "AWS_SECRET_ACCESS_KEY": "x", "AZURE_CLIENT_SECRET": "x", "MY_SERVICE_PASSWORD": "x",
           "ACTIONS_RUNTIME_TOKEN": "x", "TRITON_SECRET_TOKEN": "x"}


def test_secrets_hidden_and_hang_times_out(monkeypatch):
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    env_reader = source(EXPLOITS / "env_reader.py")
    with Evaluator("cpu", timeout_s=15) as ev:
        verdict = ev.verify_source(env_reader, dtypes=["float32"])
        assert verdict.passed, verdict.reason  # it raises if it sees any secret-looking variable
        hung = ev.verify_source(source(EXPLOITS / "fault_hangs.py"), dtypes=["float32"])
        assert hung.status is Status.TIMEOUT and "killed" in hung.reason
        # the message says where the verification was: the first call of the smoke stage, in fp32
        assert "it was last at: stage smoke, shape " in hung.reason and "float32" in hung.reason, hung.reason
        pid_after_hang = ev.worker_pid
        assert pid_after_hang is None  # the whole group was killed
        again = ev.verify_source(env_reader, dtypes=["float32"])
        assert again.passed, again.reason
        assert ev.restarts == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.timeout(120)
def test_a_hung_candidate_dies_with_the_process_that_ran_it(tmp_path):
    # The candidate's worker runs in its own session, so no signal to its parent's group reaches it; a
    # parent killed outright (SIGKILL, the OOM killer, a loop's evaluation process past its grace) must
    # not leave it spinning on the device.
    script = tmp_path / "parent.py"
    script.write_text("import sys\nfrom autokernel_ci.harness import Evaluator\n"
                      "Evaluator('cpu', timeout_s=300).verify_source(open(sys.argv[1]).read(), dtypes=['float32'])\n")
    parent = subprocess.Popen([sys.executable, str(script), str(EXPLOITS / "fault_hangs.py")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 90
        workers: list[int] = []
        while not workers and time.time() < deadline and parent.poll() is None:
            time.sleep(0.2)
            workers = [p for p, cmd in children(parent.pid).items() if "autokernel_ci.harness.worker" in cmd]
        assert workers, "the harness worker never started"
        time.sleep(8.0)  # started, loaded the candidate, spinning in its kernel_fn
        assert alive(workers[0])
    finally:
        parent.kill()
        parent.wait()
    deadline = time.time() + 5
    while alive(workers[0]) and time.time() < deadline:
        time.sleep(0.1)
    survived = alive(workers[0])
    if survived:
        os.kill(workers[0], signal.SIGKILL)
    assert not survived, "the candidate's worker outlived its parent"
