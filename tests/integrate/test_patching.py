"""Patching the example models by their plans: outputs, engagement, torch.compile, skip reasons."""

from __future__ import annotations

import pytest
import torch
from integrate_helpers import LLAMA, MODELS
from standins import write_standins

from autokernel_ci.integrate.custom_ops import register_kernels
from autokernel_ci.integrate.patching import patch_model
from autokernel_ci.profiling.commands import profile_model
from autokernel_ci.profiling.loading import build_inputs, build_model


def _setup(ref, tmp_path, dtype="fp32"):
    plan = profile_model(ref, dtype=dtype, device="cpu")
    standins = write_standins(tmp_path)
    ops = register_kernels({o.id: standins[o.kernel_type] for o in plan.targets()})
    tdtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    model = build_model(ref, dtype=tdtype, device="cpu")
    inputs = build_inputs(ref, None, dtype=tdtype, device="cpu")
    return plan, ops, model, inputs


def _seen_ops(fn) -> set[str]:
    with torch.no_grad(), torch.profiler.profile() as prof:
        fn()
    return {e.name.removeprefix("autokernel::") for e in prof.events() if e.name.startswith("autokernel::")}


def test_llama_every_op_plugged_in_and_engaged(tmp_path):
    plan, ops, model, inputs = _setup(LLAMA, tmp_path)
    patched = patch_model(model, plan, ops)
    report = patched.autokernel_patches
    assert not report.skipped, report.skipped
    assert {ops[i].kernel_type for i in report.op_ids} == {
        "rmsnorm", "rotary_embedding", "flash_attention", "fused_mlp", "matmul", "cross_entropy"}
    with torch.no_grad():
        (loss_a, logits_a), (loss_b, logits_b) = model(*inputs), patched(*inputs)
    torch.testing.assert_close(logits_b, logits_a, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=1e-5)
    assert _seen_ops(lambda: patched(*inputs)) == {ops[i].op_name for i in report.op_ids}
    assert not _seen_ops(lambda: model(*inputs))  # the original shares weights but is untouched
    assert patched.layers[0].mlp.w_gate is model.layers[0].mlp.gate_proj.weight  # no copy of weights


def test_patched_llama_compiles_fullgraph(tmp_path):
    """fullgraph=True fails on any graph break (a Python-level kernel call, the redirect mode, the RoPE
    rebinding): passing proves the custom ops are opaque to dynamo. backend="aot_eager" traces the same
    graph as inductor without minutes of C++ compilation on a 2-core CPU."""
    plan, ops, model, inputs = _setup(LLAMA, tmp_path)
    patched = patch_model(model, plan, ops)
    torch._dynamo.reset()
    compiled = torch.compile(patched, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        _, want = model(*inputs)
        _, got = compiled(*inputs)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert len(_seen_ops(lambda: compiled(*inputs))) == len(set(patched.autokernel_patches.op_ids))


@pytest.mark.parametrize("ref", [f"{MODELS / 'gpt2.py'}:build_model",
                                 f'{MODELS / "bert.py"}:build_model(attn="eager")'])
def test_written_out_attention_is_skipped_with_the_reason(tmp_path, ref):
    plan, ops, model, inputs = _setup(ref, tmp_path)
    patched = patch_model(model, plan, ops)
    reasons = [s.reason for s in patched.autokernel_patches.skipped if s.op_id.startswith("flash_attention")]
    assert reasons and all("use F.scaled_dot_product_attention" in r for r in reasons)
    with torch.no_grad():
        torch.testing.assert_close(patched(*inputs), model(*inputs), rtol=1e-5, atol=1e-5)
    assert "layernorm_0" in _seen_ops(lambda: patched(*inputs))


def test_bert_sdpa_redirect_non_causal(tmp_path):
    plan, ops, model, inputs = _setup(f"{MODELS / 'bert.py'}:build_model", tmp_path, dtype="bf16")
    patched = patch_model(model, plan, ops)
    assert not patched.autokernel_patches.skipped
    with torch.no_grad():
        torch.testing.assert_close(patched(*inputs), model(*inputs), rtol=3e-2, atol=3e-2)
    assert "flash_attention_0" in _seen_ops(lambda: patched(*inputs))
