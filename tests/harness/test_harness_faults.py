"""Faults: crash, hang, OOM, compile error, contract error, process death; the worker is replaced
and the next candidate runs normally. Secrets in the parent never reach the candidate."""

from __future__ import annotations

import pytest
from harness_testlib import EXPLOITS, FIXTURES, source

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
