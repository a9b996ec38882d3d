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


# -- RoPE stand-ins: the signatures transformers has used, and the calls that must go to the original -------------
class _Recorder:
    """A kernel op that records its calls and returns a marker (x * 0 + 7)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x, cos, sin):
        self.calls += 1
        return x * 0 + 7


def _hf_rope(q, k, cos, sin, unsqueeze_dim=1):  # transformers 5: no position_ids
    return ("original", unsqueeze_dim)


def _hf_rope_v4(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):  # transformers 4
    return ("original", unsqueeze_dim)


def _rope_default_two(q, k, cos, sin, unsqueeze_dim=2):
    return ("original", unsqueeze_dim)


def _rope_x(x, cos, sin, unsqueeze_dim=1):  # Gemma 3n / 4 style, called with unsqueeze_dim=2
    return ("original", unsqueeze_dim)


class _HubWrapped(torch.nn.Module):  # transformers 5 wraps apply_rotary_pos_emb so a hub kernel can replace it
    def forward(self, q, k, cos, sin, unsqueeze_dim=1):
        return ("original", unsqueeze_dim)


def _qk_inputs():
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    cos, sin = torch.randn(1, 5, 8), torch.randn(1, 5, 8)
    return q, k, cos, sin


@pytest.mark.parametrize("original", [_hf_rope, _hf_rope_v4, _HubWrapped()], ids=["v5", "v4", "hub-module"])
def test_rope_standin_routes_the_kernel_case_and_passes_the_rest(original):
    from autokernel_ci.integrate.patching import _rotary_wrapper
    op = _Recorder()
    rope = _rotary_wrapper([(op, {})], original)
    q, k, cos, sin = _qk_inputs()
    out_q, out_k = rope(q, k, cos, sin)
    assert op.calls == 2 and bool((out_q == 7).all()) and bool((out_k == 7).all())
    assert rope(q, k, cos, sin, unsqueeze_dim=2) == ("original", 2)
    assert rope(q, None, cos, sin) == ("original", 1)  # k=None: a caller rotating q alone
    assert op.calls == 2


def test_rope_standin_honours_a_default_unsqueeze_dim_and_an_x_form_keyword():
    from autokernel_ci.integrate.patching import _rotary_wrapper
    op = _Recorder()
    q, k, cos, sin = _qk_inputs()
    assert _rotary_wrapper([(op, {})], _rope_default_two)(q, k, cos, sin) == ("original", 2)
    x_rope = _rotary_wrapper([(op, {})], _rope_x)
    assert x_rope(q, cos, sin, unsqueeze_dim=2) == ("original", 2)  # raised TypeError before
    table = torch.randn(5, 4)
    assert bool((x_rope(q, table, table) == 7).all())  # [S, D/2] tables: the kernel
    assert op.calls == 1


def apply_rotary_emb_strange(a, b, c, d, e, f):  # a module-level RoPE function the forward calls by name
    return a


class _StrangeAttention(torch.nn.Module):
    def forward(self, x):
        return apply_rotary_emb_strange(x, x, x, x, x, x)


def test_rope_function_with_an_unknown_signature_is_skipped_with_the_reason():
    from autokernel_ci.integrate.patching import _rotary_function_names
    reason = _rotary_function_names(_StrangeAttention())
    assert isinstance(reason, str) and "apply_rotary_emb_strange" in reason and "signature" in reason
