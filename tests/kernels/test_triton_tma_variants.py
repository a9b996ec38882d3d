"""The tensor-descriptor (TMA) variants of the Triton GEMM and attention starters, in the 16-bit dtypes they serve.

The generic variant test runs each VARIANT in the spec's last dtype (fp32), where these variants
fall back to their pointer paths; here they run in bf16 and fp16, and a launch spy proves the
descriptor kernel itself ran (not the fallback) wherever the layout allows it.
"""

from __future__ import annotations

import pytest
import torch
from test_triton_starters import _inputs, run_with_spies

from autokernel_ci.specs import get_spec

DTYPES_16 = [torch.bfloat16, torch.float16]


def _run_with_spy(kernel_type: str, config: dict, kernel_names: tuple[str, ...], cases: list[tuple], dtype):
    """Every launch of the named kernels, in one list."""
    by_kernel = run_with_spies(kernel_type, config, kernel_names, cases, dtype)
    return [launch for launches in by_kernel.values() for launch in launches]


def _spec_cases(kernel_type: str, dtype, *sets: str, seed: int = 7) -> list[tuple]:
    return [_inputs(kernel_type, shape, dtype, seed=seed) for shape in get_spec(kernel_type).shapes(*sets)]


@pytest.mark.parametrize("dtype", DTYPES_16, ids=["bf16", "fp16"])
@pytest.mark.parametrize("config", [{"VARIANT": "tma"},
                                    {"VARIANT": "tma_persistent", "FLATTEN": True, "num_stages": 4},
                                    {"VARIANT": "tma_persistent", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32},
                                    {"VARIANT": "tma", "TMA_STORE": False, "num_stages": 4}],
                         ids=["tma", "tma_persistent_flatten", "tma_persistent_small", "tma_register_store"])
def test_matmul_descriptor_variants(config: dict, dtype) -> None:
    cases = _spec_cases("matmul", dtype, "cpu", "edge")
    a, b = _inputs("matmul", {"M": 48, "K": 64, "N": 40}, dtype, seed=8)
    weight = b.T.contiguous()  # nn.Linear stores [N, K]: the model hands the kernel weight.T
    cases.append((a, weight.T))
    launches = _run_with_spy("matmul", config, ("_matmul_tma", "_matmul_tma_persistent"), cases, dtype)
    # 64x96x80 and 48x64x40 have 16-byte rows everywhere: both reach the descriptor kernel, one of
    # them through b's transpose (B_NK); the odd widths (N=17, 31, 13, 1) fall back.
    assert len(launches) == 2, launches
    assert sorted(launch["B_NK"] for launch in launches) == [False, True]


@pytest.mark.parametrize("dtype", DTYPES_16, ids=["bf16", "fp16"])
def test_fused_mlp_descriptor_variant(dtype) -> None:
    cases = _spec_cases("fused_mlp", dtype, "cpu", "edge")
    launches = _run_with_spy("fused_mlp", {"VARIANT": "tma"}, ("_gate_up_tma",), cases, dtype)
    assert launches, "no shape reached the tensor-descriptor kernel"


@pytest.mark.parametrize("dtype", DTYPES_16, ids=["bf16", "fp16"])
def test_attention_descriptor_variant_flat_and_4d(dtype) -> None:
    # S a multiple of both blocks (32x16) and packed heads: every tile inside one head, so the flat
    # [B*H*S, D] descriptors; ragged S (24, 1, 17, 333) and a [B,S,H,D] projection viewed as
    # [B,H,S,D] (not contiguous) take the 4-d view.
    flat = {"B": 1, "H": 4, "Hkv": 2, "S": 64, "D": 32, "causal": True}
    q, k, v, causal, scale = _inputs("flash_attention", {**flat, "H": 4, "Hkv": 4}, dtype, seed=9)
    strided = (q.transpose(1, 2).contiguous().transpose(1, 2), k, v, causal, scale)
    cases = [_inputs("flash_attention", flat, dtype, seed=9), _inputs("flash_attention", {**flat, "causal": False},
                                                                     dtype, seed=10), strided]
    cases += _spec_cases("flash_attention", dtype, "cpu", "edge", "odd")
    launches = _run_with_spy("flash_attention", {"VARIANT": "tma", "BLOCK_M": 32, "BLOCK_N": 16},
                             ("_attn_fwd_tma",), cases, dtype)
    expected = [c[0].shape[2] % 32 == 0 and c[0].is_contiguous() for c in cases]
    assert [launch["FLAT"] for launch in launches] == expected
    assert True in expected and False in expected



@pytest.mark.parametrize("dtype", DTYPES_16, ids=["bf16", "fp16"])
@pytest.mark.parametrize("variant", ["pointer", "tma"])
def test_attention_negative_scale_and_register_cap(variant: str, dtype) -> None:
    """The scale is folded into exp2's FMA, so the row max is max(qk) * scale only for a positive scale;
    a negative one must take min(qk), and a zero scale (uniform attention) must not mask -inf * 0 into NaN.
    MAXNREG reaches the launch as Triton's maxnreg option."""
    cases = _spec_cases("flash_attention", dtype, "cpu", "odd")
    q, k, v, causal, scale = cases[0]
    # Scores spread over ~200 (scaled, base 2): a max taken on the wrong side overflows exp2 to inf.
    q = q * 16
    cases += [(q, k, v, causal, -scale), (q, k, v, not causal, -2 * scale), (q, k, v, causal, 0.0),
              (q, k, v, not causal, 0.0)]
    name = "_attn_fwd_tma" if variant == "tma" else "_attn_fwd"
    launches = _run_with_spy("flash_attention", {"VARIANT": variant, "BLOCK_M": 32, "BLOCK_N": 16, "MAXNREG": 128},
                             (name,), cases, dtype)
    assert len(launches) == len(cases) and all(launch["maxnreg"] == 128 for launch in launches)
    assert [launch["NEG_SCALE"] for launch in launches] == [False] * (len(cases) - 4) + [True, True, False, False]
