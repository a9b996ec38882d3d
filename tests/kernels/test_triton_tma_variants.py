"""The tensor-descriptor (TMA) variants of the Triton GEMM and attention starters, in the 16-bit dtypes they serve.

The generic variant test runs each VARIANT in the spec's last dtype (fp32), where these variants
fall back to their pointer paths; here they run in bf16 and fp16, and a launch spy proves the
descriptor kernel itself ran (not the fallback) wherever the layout allows it.
"""

from __future__ import annotations

import pytest
import torch
from starter_run import HOPPER, launch_counts, make_inputs, run_with_spies, starter_module

from autokernel_ci.specs import get_spec

DTYPES_16 = [torch.bfloat16, torch.float16]


def _run_with_spy(kernel_type: str, config: dict, kernel_names: tuple[str, ...], cases: list[tuple], dtype):
    """Every launch of the named kernels, in one list."""
    by_kernel = run_with_spies(kernel_type, config, kernel_names, cases, dtype)
    return [launch for launches in by_kernel.values() for launch in launches]


def _spec_cases(kernel_type: str, dtype, *sets: str, seed: int = 7) -> list[tuple]:
    return [make_inputs(kernel_type, shape, dtype, seed=seed) for shape in get_spec(kernel_type).shapes(*sets)]


def _weight_case(shape: dict, dtype, seed: int) -> tuple:
    """a and b = weight.T for an nn.Linear weight [N, K]: b itself has no contiguous rows, b.T does."""
    a, b = make_inputs("matmul", shape, dtype, seed=seed)
    return a, b.T.contiguous().T


@pytest.mark.parametrize("dtype", DTYPES_16, ids=["bf16", "fp16"])
@pytest.mark.parametrize("config", [{"VARIANT": "tma"},
                                    {"VARIANT": "tma_persistent", "FLATTEN": True, "num_stages": 4},
                                    {"VARIANT": "tma_persistent", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32},
                                    {"VARIANT": "tma", "TMA_STORE": False, "num_stages": 4}],
                         ids=["tma", "tma_persistent_flatten", "tma_persistent_small", "tma_register_store"])
def test_matmul_descriptor_variants(config: dict, dtype) -> None:
    cases = _spec_cases("matmul", dtype, "cpu", "edge") + [_weight_case({"M": 48, "K": 64, "N": 40}, dtype, 8)]
    launches = _run_with_spy("matmul", config, ("_matmul_tma", "_matmul_tma_persistent"), cases, dtype)
    # 64x96x80 and 48x64x40 have 16-byte rows everywhere: both reach the descriptor kernel, one of
    # them through b's transpose (B_NK); the odd widths (N=17, 31, 13, 1) fall back.
    assert len(launches) == 2, launches
    assert sorted(launch["B_NK"] for launch in launches) == [False, True]


@pytest.mark.skipif(HOPPER, reason="the CPU's and non-sm_90 GPUs' rule; sm_90 runs the Gluon kernel (below)")
@pytest.mark.parametrize("dtype", DTYPES_16, ids=["bf16", "fp16"])
def test_matmul_gluon_variant_falls_back_off_hopper(dtype) -> None:
    """Where wgmma is missing, VARIANT "gluon" takes the "tma" rule: the descriptor kernel where the rows are
    16-byte aligned (64x96x80, and a weight's transpose), the tiled pointer kernel where not (the odd widths)."""
    cases = _spec_cases("matmul", dtype, "cpu", "edge") + [_weight_case({"M": 48, "K": 64, "N": 40}, dtype, 8)]
    assert launch_counts("matmul", {"VARIANT": "gluon"}, cases, dtype) == {"_matmul_tma": 2, "_matmul_tiled": 4}


@pytest.mark.skipif(not HOPPER, reason="VARIANT gluon runs on sm_90 GPUs only (compiled for sm_90 on the CPU)")
@pytest.mark.parametrize("dtype", DTYPES_16, ids=["bf16", "fp16"])
@pytest.mark.parametrize(("shape", "weight", "config", "kernel"), [
    ({"M": 300, "K": 200, "N": 1000}, False, {}, "_matmul_gluon"),  # ragged M, K (200 = 3 x 64 + 8) and N tiles
    ({"M": 300, "K": 200, "N": 1000}, True, {}, "_matmul_gluon"),  # b = weight.T: K-major b tiles
    ({"M": 40, "K": 64, "N": 96}, False, {}, "_matmul_gluon"),  # the second warpgroup's rows all past M
    ({"M": 1, "K": 128, "N": 256}, True, {}, "_matmul_gluon"),  # one row: a decode step through nn.Linear
    # 1,536 tiles over 132 SMs: each block takes 11-12 tiles, its ring and c buffers running on across them
    ({"M": 8192, "K": 768, "N": 3072}, True, {"GL_BLOCK_N": 128}, "_matmul_gluon"),
    ({"M": 1000, "K": 1024, "N": 1000}, False, {"GL_BLOCK_N": 128, "GL_STAGES": 2}, "_matmul_gluon"),
    ({"M": 256, "K": 512, "N": 512}, False, {"GROUP_M": 1}, "_matmul_gluon"),
    ({"M": 256, "K": 512, "N": 512}, False, {"BLOCK_M": 64}, "_matmul_tma"),
    ({"M": 64, "K": 100, "N": 128}, False, {}, "_matmul_tiled"),  # a's rows of 200 B: no descriptor
], ids=["ragged", "ragged-weight", "half-tile", "one-row-weight", "persistent-weight", "128-wide-2-stages",
        "ungrouped", "bm64-tma", "unaligned-tiled"])
def test_matmul_gluon_on_hopper(shape: dict, weight: bool, config: dict, kernel: str, dtype) -> None:
    """VARIANT gluon against the reference, and the kernel that ran is the one the launcher's rule picks."""
    cases = [_weight_case(shape, dtype, 12) if weight else make_inputs("matmul", shape, dtype, seed=12)]
    assert launch_counts("matmul", {"VARIANT": "gluon", **config}, cases, dtype) == {kernel: 1}


@pytest.mark.skipif(not HOPPER, reason="the sm_90 rule")
def test_matmul_gluon_spec_sets_on_hopper() -> None:
    """Every spec shape set in bf16 through VARIANT gluon (LLaMA-7B included): the Gluon kernel where the rows
    allow descriptors (64x96x80, GPT-2, both LLaMA-7B shapes), the tiled kernel for the odd widths; fp32 on the
    tiled kernel."""
    cases = _spec_cases("matmul", torch.bfloat16, "cpu", "edge", "odd", "gpt2", "llama7b")
    launches = launch_counts("matmul", {"VARIANT": "gluon"}, cases, torch.bfloat16)
    assert launches == {"_matmul_gluon": 4, "_matmul_tiled": 6}
    cases = _spec_cases("matmul", torch.float32, "cpu", "odd")
    assert launch_counts("matmul", {"VARIANT": "gluon"}, cases, torch.float32) == {"_matmul_tiled": 4}


@pytest.mark.parametrize("f32", [(64, 64, 32, 2), (128, 128, 32, 3)], ids=["64x64x32", "128x128x32"])
def test_matmul_fp32_tile_knobs_set_the_pointer_kernels_tile(f32: tuple[int, int, int, int]) -> None:
    """fp32 runs the pointer kernel on the F32_* tile; 16-bit calls that fall back to it (the odd widths) keep
    BLOCK_M / BLOCK_N / BLOCK_K whatever the F32_* knobs say."""
    config = {"VARIANT": "tiled", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 16,
              "F32_BLOCK_M": f32[0], "F32_BLOCK_N": f32[1], "F32_BLOCK_K": f32[2], "F32_STAGES": f32[3]}
    for dtype, tile in ((torch.float32, f32[:3]), (torch.bfloat16, (128, 128, 16))):
        launches = _run_with_spy("matmul", config, ("_matmul_tiled",), _spec_cases("matmul", dtype, "cpu"), dtype)
        tiles = {(launch["BLOCK_M"], launch["BLOCK_N"], launch["BLOCK_K"]) for launch in launches}
        assert launches and tiles == {tile}, dtype


def test_fused_mlp_fp32_widest_tile_runs_narrowed() -> None:
    """fp32 at BLOCK_M = BLOCK_N = 256 runs as 256 x 128 on every call and matches the reference: 256 x 256 would
    stage 262,144 B of h for its store where h's rows are not 16-element multiples (F = 40 and 5 here; 864 is
    narrowed all the same), more than sm_90's 232,448 (tests/kernels/test_triton_sm90_smem.py); on a GPU that
    launch raises OutOfResources."""
    config = {"VARIANT": "pointer", "BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 32, "num_stages": 3}
    cases = _spec_cases("fused_mlp", torch.float32, "cpu", "edge", "odd")
    launches = _run_with_spy("fused_mlp", config, ("_gate_up_kernel",), cases, torch.float32)
    assert len(launches) == len(cases)
    assert {(launch["BLOCK_M"], launch["BLOCK_N"]) for launch in launches} == {(256, 128)}


@pytest.mark.parametrize("dtype", DTYPES_16, ids=["bf16", "fp16"])
def test_fused_mlp_descriptor_variant(dtype) -> None:
    cases = _spec_cases("fused_mlp", dtype, "cpu", "edge")
    launches = _run_with_spy("fused_mlp", {"VARIANT": "tma"}, ("_gate_up_tma",), cases, dtype)
    assert launches, "no shape reached the tensor-descriptor kernel"


@pytest.mark.skipif(HOPPER, reason="the CPU's and non-sm_90 GPUs' rule; sm_90 runs the Gluon kernel (below)")
@pytest.mark.parametrize("dtype", DTYPES_16, ids=["bf16", "fp16"])
def test_fused_mlp_gluon_variant_falls_back_off_hopper(dtype) -> None:
    """Where wgmma is missing, VARIANT "gluon" takes the tma rule: the descriptor kernel where the rows are
    16-byte aligned, the pointer kernel where not (F = 5: h's 10-byte rows)."""
    cases = _spec_cases("fused_mlp", dtype, "cpu", "edge")
    assert launch_counts("fused_mlp", {"VARIANT": "gluon"}, cases, dtype) == {"_gate_up_tma": 3, "_gate_up_kernel": 1}


@pytest.mark.parametrize(("kernel_type", "config", "smem", "stages"), [
    ("matmul", {}, 232448, 3),  # 3 x 48 KB + the 64 KB c tile: 212,992 B of 232,448
    ("matmul", {"GL_STAGES": 5}, 232448, 3),  # a fourth stage does not fit
    ("matmul", {"GL_STAGES": 2}, 232448, 2),
    ("matmul", {"GL_BLOCK_N": 128, "GL_STAGES": 5}, 232448, 5),  # 5 x 32 KB + 32 KB
    ("matmul", {}, 101376, 0),  # a 99 KB GPU: the c tile and one stage only, which would hang
    ("matmul", {"GL_BLOCK_N": 128}, 101376, 2),
    ("matmul", {"GL_BLOCK_N": 512}, 232448, 0),  # wider than any wgmma
    ("fused_mlp", {}, 232448, 4),  # 4 x 48 KB + the 32 KB h tile: 229,376 B of 232,448
    ("fused_mlp", {"GL_STAGES": 6}, 232448, 4),  # a fifth stage does not fit
    ("fused_mlp", {"GL_STAGES": 3}, 232448, 3),
    ("fused_mlp", {"GL_BLOCK_N": 64}, 232448, 4),
    ("fused_mlp", {}, 101376, 0),  # a 99 KB GPU: one stage only, which would hang
    ("fused_mlp", {"GL_BLOCK_N": 64}, 101376, 2),
    ("fused_mlp", {"GL_BLOCK_N": 256}, 232448, 0),  # gate and up side by side: a 512-wide wgmma does not exist
    *[(kernel_type, {"BLOCK_M": 64}, 232448, 0) for kernel_type in ("matmul", "fused_mlp")],  # two warpgroups of 64
], ids=["mm-default", "mm-capped", "mm-two", "mm-128-wide", "mm-small-smem", "mm-small-smem-128", "mm-bn512",
        "mlp-default", "mlp-capped", "mlp-three", "mlp-64-wide", "mlp-small-smem", "mlp-small-smem-64", "mlp-bn256",
        "mm-bm64", "mlp-bm64"])
def test_gluon_stage_count(kernel_type: str, config: dict, smem: int, stages: int) -> None:
    """The ring depth the launcher gives a Gluon GEMM (16-bit elements) for a CONFIG and a shared-memory size."""
    module = starter_module(kernel_type)
    assert module._gluon_stage_count({**module.CONFIG, **config}, 2, smem) == stages


@pytest.mark.parametrize("kernel_type", ["matmul", "fused_mlp"])
def test_unknown_variant_is_named(kernel_type: str) -> None:
    with pytest.raises(ValueError, match=r"VARIANT must be one of .*got 'wgmma'"):
        launch_counts(kernel_type, {"VARIANT": "wgmma"}, _spec_cases(kernel_type, torch.float16, "cpu")[:1],
                      torch.float16)


@pytest.mark.skipif(not HOPPER, reason="VARIANT gluon runs on sm_90 GPUs only (compiled for sm_90 on the CPU)")
@pytest.mark.parametrize("dtype", DTYPES_16, ids=["bf16", "fp16"])
@pytest.mark.parametrize(("shape", "config", "kernel"), [
    ({"M": 300, "D": 200, "F": 1000}, {}, "_gate_up_gluon"),  # ragged M, K (200 = 3 x 64 + 8) and F tiles
    ({"M": 40, "D": 64, "F": 96}, {}, "_gate_up_gluon"),  # the second warpgroup's rows all past M
    # 1,024 tiles over 132 SMs: each block takes 7-8 tiles, its ring and h buffers running on across them
    ({"M": 8192, "D": 768, "F": 2048}, {}, "_gate_up_gluon"),
    ({"M": 1000, "D": 1024, "F": 1000}, {"GL_BLOCK_N": 64, "GL_STAGES": 2}, "_gate_up_gluon"),
    ({"M": 256, "D": 512, "F": 512}, {"GROUP_M": 1}, "_gate_up_gluon"),
    ({"M": 256, "D": 512, "F": 512}, {"BLOCK_M": 64}, "_gate_up_tma"),
    ({"M": 64, "D": 100, "F": 128}, {}, "_gate_up_kernel"),  # x rows of 200 B: no descriptor
], ids=["ragged", "half-tile", "persistent", "64-wide-2-stages", "ungrouped", "bm64-tma", "unaligned-pointer"])
def test_fused_mlp_gluon_on_hopper(shape: dict, config: dict, kernel: str, dtype) -> None:
    """VARIANT gluon against the reference, and the kernel that ran is the one the launcher's rule picks."""
    cases = [make_inputs("fused_mlp", shape, dtype, seed=11)]
    assert launch_counts("fused_mlp", {"VARIANT": "gluon", **config}, cases, dtype) == {kernel: 1}


@pytest.mark.skipif(not HOPPER, reason="the sm_90 rule")
def test_fused_mlp_gluon_spec_sets_on_hopper() -> None:
    """Every spec shape set in bf16 through the default CONFIG (LLaMA-7B included): the Gluon kernel wherever
    the rows allow descriptors (all but edge's F = 5), fp32 on the pointer kernel."""
    cases = _spec_cases("fused_mlp", torch.bfloat16, "cpu", "edge", "odd", "gpt2", "llama7b")
    assert launch_counts("fused_mlp", {}, cases, torch.bfloat16) == {"_gate_up_gluon": 6, "_gate_up_kernel": 1}
    cases = _spec_cases("fused_mlp", torch.float32, "cpu", "odd")
    assert launch_counts("fused_mlp", {}, cases, torch.float32) == {"_gate_up_kernel": 3}


@pytest.mark.parametrize("dtype", DTYPES_16, ids=["bf16", "fp16"])
def test_attention_descriptor_variant_flat_and_4d(dtype) -> None:
    # S a multiple of both blocks (32x16) and packed heads: every tile inside one head, so the flat
    # [B*H*S, D] descriptors; ragged S (24, 1, 17, 333) and a [B,S,H,D] projection viewed as
    # [B,H,S,D] (not contiguous) take the 4-d view.
    flat = {"B": 1, "H": 4, "Hkv": 2, "S": 64, "D": 32, "causal": True}
    q, k, v, causal, scale = make_inputs("flash_attention", {**flat, "H": 4, "Hkv": 4}, dtype, seed=9)
    strided = (q.transpose(1, 2).contiguous().transpose(1, 2), k, v, causal, scale)
    cases = [make_inputs("flash_attention", flat, dtype, seed=9),
             make_inputs("flash_attention", {**flat, "causal": False}, dtype, seed=10), strided]
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
