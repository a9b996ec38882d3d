"""Hugging Face models built from tiny configs (random weights, no hub access): profile + plug-back."""

from __future__ import annotations

import pytest
import torch
from standins import write_standins

from autokernel_ci.integrate.custom_ops import register_kernels
from autokernel_ci.integrate.patching import patch_model
from autokernel_ci.profiling.commands import profile_model
from autokernel_ci.profiling.loading import build_inputs, build_model

pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")

MODEL_FILE = '''
import torch
import transformers


def llama():
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   attn_implementation="sdpa")
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg)


def gpt2():
    cfg = transformers.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                                  attn_implementation="sdpa")
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg)


def example_inputs():
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    return {"input_ids": ids, "use_cache": False}
'''


@pytest.fixture(scope="module")
def hf_file(tmp_path_factory):
    f = tmp_path_factory.mktemp("hf") / "hf_models.py"
    f.write_text(MODEL_FILE)
    return f


@pytest.mark.parametrize("name,expected", [
    ("llama", {"rmsnorm", "fused_mlp", "flash_attention", "matmul", "rotary_embedding"}),
    ("gpt2", {"layernorm", "flash_attention", "matmul"}),
])
def test_hf_model_profiles_and_patches(hf_file, tmp_path, name, expected):
    ref = f"{hf_file}:{name}"
    plan = profile_model(ref, dtype="fp32", device="cpu")
    types = {o.kernel_type for o in plan.ops}
    assert expected <= types, [(o.id, o.name) for o in plan.ops]
    st = write_standins(tmp_path)
    ops = register_kernels({o.id: st[o.kernel_type] for o in plan.targets()})
    model = build_model(ref, dtype=torch.float32, device="cpu")
    inputs = build_inputs(ref, None, dtype=torch.float32, device="cpu")
    patched = patch_model(model, plan, ops)
    applied = {ops[i].kernel_type for i in patched.autokernel_patches.op_ids}
    assert expected - {"matmul"} <= applied or name == "gpt2", patched.autokernel_patches.skipped
    with torch.no_grad():
        torch.testing.assert_close(patched(**inputs).logits, model(**inputs).logits, rtol=1e-4, atol=1e-4)
    with torch.no_grad(), torch.profiler.profile() as prof:
        patched(**inputs)
    seen = {e.name for e in prof.events() if e.name.startswith("autokernel::")}
    assert {f"autokernel::{ops[i].op_name}" for i in patched.autokernel_patches.op_ids} == seen
