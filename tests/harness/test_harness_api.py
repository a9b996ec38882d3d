"""verify()/bench()/Evaluator.evaluate end to end on CPU, and the CLI commands' exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from harness_testlib import EXPLOITS, FIXTURES, source

from autokernel_ci.harness import bench, verify
from autokernel_ci.harness.results import BenchResult, Status, Verdict


def test_evaluate_honest_returns_verdict_and_bench(evaluator):
    verdict, result = evaluator.evaluate(source(FIXTURES / "rmsnorm_honest.py"), dtype="float32")
    assert verdict.passed, verdict.reason
    assert isinstance(result, BenchResult) and len(result.rows) == 1
    row = result.rows[0]
    assert row.dtype == "float32" and row.candidate.samples >= 3 and row.eager is not None
    assert row.speedup_vs_eager == pytest.approx(row.eager.median_us / row.candidate.median_us, rel=1e-2, abs=1e-4)
    assert "mean nothing" in result.note
    assert Verdict.from_dict(json.loads(json.dumps(verdict.to_dict()))) == verdict
    assert BenchResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_evaluate_rejected_has_no_bench(evaluator):
    verdict, result = evaluator.evaluate(source(EXPLOITS / "output_alias.py"), dtype="bf16",
                                         extra_shapes=({"M": 5, "N": 7},))
    assert verdict.status is Status.FAIL and result is None


def test_verify_and_bench_functions(tmp_path):
    with pytest.raises(FileNotFoundError):
        verify(tmp_path / "missing.py")
    bad = tmp_path / "bad.py"
    bad.write_text((EXPLOITS / "fault_contract.py").read_text())
    assert verify(bad, device="cpu").status is Status.INVALID  # static: no worker started
    result = bench(FIXTURES / "softmax_honest.py", device="cpu", shapes=[{"M": 4, "N": 32}], dtypes=["float32"])
    assert result.rows[0].shape == {"M": 4, "N": 32} and result.gpu == "cpu"


def _cli(*args, cwd):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.run([sys.executable, "-m", "autokernel_ci", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_cli_exit_codes(tmp_path):
    out = tmp_path / "v.json"
    ok = _cli("verify", str(FIXTURES / "softmax_honest.py"), "--device", "cpu", "--json", str(out), cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "PASS" in ok.stdout and json.loads(out.read_text())["status"] == "pass"
    rejected = _cli("verify", str(EXPLOITS / "fault_contract.py"), "--device", "cpu", cwd=tmp_path)
    assert rejected.returncode == 1 and "INVALID" in rejected.stdout
    missing = _cli("verify", str(tmp_path / "nope.py"), cwd=tmp_path)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    bad_set = _cli("verify", str(FIXTURES / "softmax_honest.py"), "--device", "cpu", "--shapes", "nosuch",
                   cwd=tmp_path)
    assert bad_set.returncode == 2 and "nosuch" in bad_set.stderr



@pytest.mark.parametrize("shapes", [(), ("--shapes", "cpu")])
def test_cli_bench_of_a_file_breaking_the_contract_is_rejected_not_a_usage_error(tmp_path, shapes):
    broken = _cli("bench", str(EXPLOITS / "fault_contract.py"), "--device", "cpu", *shapes, cwd=tmp_path)
    assert broken.returncode == 1 and "INVALID" in broken.stdout, broken.stdout + broken.stderr


def test_cli_bench_says_it_did_not_check_results(tmp_path):
    wrong = _cli("bench", str(EXPLOITS / "input_mutation.py"), "--device", "cpu", "--dtypes", "fp32", "--no-compile",
                 cwd=tmp_path)
    assert wrong.returncode == 0, wrong.stdout + wrong.stderr  # it ran: bench times, verify judges
    assert "results not checked" in wrong.stdout and f"autokernel-ci verify {EXPLOITS / 'input_mutation.py'}" \
        in wrong.stdout
