"""The end-to-end check through its sandboxed worker (a real child process)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from integrate_helpers import LLAMA
from standins import write_standins

from autokernel_ci.integrate.end_to_end import (
    EndToEndResult,
    Engagement,
    end_to_end,
    fresh_inputs,
    render_end_to_end,
    worker_env,
)
from autokernel_ci.paths import starter_kernel
from autokernel_ci.profiling.commands import profile_model


@pytest.fixture(scope="module")
def llama_plan():
    return profile_model(LLAMA, dtype="fp32", device="cpu")


def test_pass_with_compile_and_engagement(llama_plan, tmp_path):
    st = write_standins(tmp_path)
    res = end_to_end(LLAMA, None, llama_plan, {o.id: st[o.kernel_type] for o in llama_plan.targets()},
                     dtype="fp32", device="cpu", compile=True, compile_backend="aot_eager")
    assert res.status == "pass", res.reason
    assert res.correct and res.rel_l2 < 1e-5 and res.engaged
    assert all(e.calls_eager > 0 and e.calls_compiled == e.calls_eager for e in res.engagement)
    assert res.eager_us > 0 and res.patched_us > 0 and res.compile_us > 0 and res.patched_compile_us > 0
    assert EndToEndResult.from_dict(json.loads(json.dumps(res.to_dict()))) == res
    text = render_end_to_end(res)
    assert text.startswith("End-to-end check: PASS") and "autokernel::rmsnorm_0" in text
    assert "| patched, torch.compile |" in render_end_to_end(res, markdown=True)


def test_a_wrong_kernel_fails(llama_plan, tmp_path):
    bad = tmp_path / "bad_rmsnorm.py"
    bad.write_text('"""Wrong on purpose: forgets the weight."""\nimport torch\n\nKERNEL_TYPE = "rmsnorm"\n'
                   'BACKEND = "triton"\nCONFIG = {}\nSEARCH_SPACE = {}\n\n\ndef kernel_fn(x, weight, eps):\n'
                   '    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)\n')
    res = end_to_end(LLAMA, None, llama_plan, {"rmsnorm-0": bad}, dtype="fp32", device="cpu", compile=False)
    assert res.status == "fail" and not res.correct and "outputs differ" in res.reason
    assert res.engaged  # it ran; it was wrong


SECRETS = {"GITHUB_TOKEN": "ghs_should_not_leak", "GH_TOKEN": "ghs_should_not_leak",
           "OPENAI_API_KEY": "sk-should-not-leak", "ANTHROPIC_API_KEY": "sk-ant-should-not-leak",
           "HF_TOKEN": "hf_should_not_leak", "AWS_SECRET_ACCESS_KEY": "should-not-leak"}


def test_worker_env_is_the_sandbox_allowlist():
    """The e2e child gets harness/sandbox.py's scrubbed environment plus what it needs to run."""
    from autokernel_ci.harness import sandbox

    parent = {"PATH": "/bin", "HOME": "/h", "PYTHONPATH": "/extra", "HF_HOME": "/hf", "TRANSFORMERS_OFFLINE": "1",
              "CUDA_VISIBLE_DEVICES": "0", "SOME_UNRELATED": "x", **SECRETS}
    env = worker_env(parent)
    assert not set(SECRETS) & set(env) and "SOME_UNRELATED" not in env
    assert env["PYTHONPATH"].split(os.pathsep)[1:] == ["/extra"]  # this package first, then the parent's
    assert (Path(env["PYTHONPATH"].split(os.pathsep)[0]) / "autokernel_ci" / "__init__.py").is_file()
    assert env["HF_HOME"] == "/hf" and env["TRANSFORMERS_OFFLINE"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "0"
    assert {k: v for k, v in env.items() if k not in ("PYTHONPATH", "HF_HOME", "TRANSFORMERS_OFFLINE")} == \
        {k: v for k, v in sandbox.scrubbed_env(parent).items() if k != "PYTHONPATH"}


def test_kernels_never_see_secrets(llama_plan, tmp_path, monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AUTOKERNEL_TEST_UNLISTED", "not for the child")
    assert not set(SECRETS) & set(worker_env())
    spy = tmp_path / "spy_rmsnorm.py"
    spy.write_text('"""Raises if it can read a secret."""\nimport os\n\nimport torch\n\nKERNEL_TYPE = "rmsnorm"\n'
                   'BACKEND = "triton"\nCONFIG = {}\nSEARCH_SPACE = {}\n\n\ndef kernel_fn(x, weight, eps):\n'
                   f'    leaked = [k for k in {sorted(SECRETS)!r} + ["AUTOKERNEL_TEST_UNLISTED"] if k in os.environ]\n'
                   '    assert not leaked, leaked\n'
                   '    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight\n')
    res = end_to_end(LLAMA, None, llama_plan, {"rmsnorm-0": spy}, dtype="fp32", device="cpu", compile=False)
    assert res.status == "pass", res.reason


def test_worker_crash_is_reported(llama_plan, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text('KERNEL_TYPE = "rmsnorm"\nBACKEND = "triton"\nCONFIG = {}\nSEARCH_SPACE = {}\n'
                      "import os\nos._exit(3)\n\ndef kernel_fn(x, weight, eps):\n    return x\n")
    res = end_to_end(LLAMA, None, llama_plan, {"rmsnorm-0": broken}, dtype="fp32", device="cpu", compile=False)
    assert res.status == "error" and "exited with 3" in res.reason


def test_fresh_inputs_differ_and_keep_ignore_index():
    import torch

    ids = torch.tensor([[1, 5, 7, -100]])
    (new,) = fresh_inputs((ids,))
    assert new[0, 3] == -100 and int(new.max()) < 8 and not torch.equal(new, ids)


@pytest.mark.slow
def test_real_starter_kernels_in_tiny_llama(llama_plan):
    """The starter Triton kernels from kernels/triton (Triton interpreter on CPU) plugged into the model."""
    kernels = {}
    for o in llama_plan.targets():
        try:
            kernels[o.id] = starter_kernel(o.kernel_type, "triton")
        except FileNotFoundError:
            continue
    assert {k.split("-")[0] for k in kernels} >= {"rmsnorm", "fused_mlp", "rotary_embedding"}
    res = end_to_end(LLAMA, None, llama_plan, kernels, dtype="fp32", device="cpu", compile=False)
    assert res.status == "pass", render_end_to_end(res)


@pytest.mark.parametrize(("gpu_kernels", "engaged"), [
    (["reduce_bf16_n"], True),
    (["void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float> >(at::native::ReduceOp<float>)"], False),
    (["void splitKreduce_kernel<32, 16, int, float>(cublasSplitKParams<float>)"], False),
])
def test_engagement_on_gpu_needs_the_files_own_kernel_not_a_library_namesake(gpu_kernels, engaged):
    """The op was called; whether it counts depends on which kernel ran (the CUDA reduce's own name is 'reduce_')."""
    e = Engagement(op_id="reduce-0", kernel_type="reduce", op_name="autokernel::reduce_0", calls_eager=1,
                   gpu_kernels=gpu_kernels, own_kernels=["reduce_"])
    assert e.engaged is engaged
