"""The nine specs: complete, consistent, and their inputs realistic (DESIGN.md §4)."""

import pytest
import torch

from autokernel_ci.compare import compare
from autokernel_ci.specs import KERNEL_TYPES, SPECS, get_spec
from autokernel_ci.specs.base import SHAPE_SET_NAMES, Tolerance
from autokernel_ci.specs.cross_entropy import IGNORE_INDEX

CPU = torch.device("cpu")


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_nine_types_in_design_order():
    assert KERNEL_TYPES == ("matmul", "softmax", "layernorm", "rmsnorm", "flash_attention", "fused_mlp",
                            "cross_entropy", "rotary_embedding", "reduce")


def test_unknown_type_names_the_choices():
    with pytest.raises(KeyError, match="expected one of matmul"):
        get_spec("conv2d")


@pytest.mark.parametrize("name", KERNEL_TYPES)
def test_every_shape_set_present_and_shapes_complete(name):
    spec = SPECS[name]
    assert set(SHAPE_SET_NAMES) <= set(spec.shape_sets)
    keys = set(spec.model_shape())
    for shape in spec.shapes():
        assert keys - {"B"} <= set(shape) | {"B"}, (name, shape)
    assert spec.dtypes[0] is not None and set(spec.dtypes) <= {torch.float32, torch.float16, torch.bfloat16}


@pytest.mark.parametrize("name", KERNEL_TYPES)
def test_roofline_models_positive_and_scale_with_dtype(name):
    spec = SPECS[name]
    shape = spec.model_shape()
    assert spec.flops(shape) > 0
    b16, b32 = spec.bytes_moved(shape, torch.bfloat16), spec.bytes_moved(shape, torch.float32)
    assert 0 < b16 < b32 <= 2.1 * b16


@pytest.mark.parametrize("name", KERNEL_TYPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_inputs_seeded_reference_finite_and_within_own_tolerance(name, dtype):
    spec = SPECS[name]
    if dtype not in spec.tolerances:
        pytest.skip(f"{name} does not run in {dtype}")
    for shape in spec.shapes("cpu", "edge"):
        a = spec.make_inputs(shape, dtype, CPU, _gen(1))
        b = spec.make_inputs(shape, dtype, CPU, _gen(1))
        c = spec.make_inputs(shape, dtype, CPU, _gen(2))
        tensors = [(x, y, z) for x, y, z in zip(a, b, c, strict=True) if isinstance(x, torch.Tensor)]
        assert all(torch.equal(x, y) for x, y, _ in tensors), "same seed must give the same inputs"
        assert any(not torch.equal(x, z) for x, _, z in tensors if x.numel() > 1) or all(
            x.numel() <= 1 for x, _, _ in tensors), "another seed must give other inputs"
        ref = spec.run_reference(a)
        assert torch.isfinite(ref).all()
        # The reference run in the input dtype (what eager PyTorch does) passes the tolerance:
        # a tolerance tighter than the dtype allows would reject every honest kernel.
        # cross_entropy is exempt: it demands an fp32 loss where eager fp16 rounds the scalar to fp16.
        if spec.output_dtype is None:
            native = spec.reference(*a)
            assert compare(native, ref, spec.tolerances[dtype]) is None, (name, shape, dtype)


@pytest.mark.parametrize("name", KERNEL_TYPES)
def test_stress_cases_finite_and_different_from_plain_inputs(name):
    spec = SPECS[name]
    shape = spec.shapes("cpu")[0]
    plain = spec.make_inputs(shape, spec.dtypes[0], CPU, _gen(3))
    for case in spec.stress_cases:
        inputs = case.make_inputs(shape, spec.dtypes[0], CPU, _gen(3))
        assert torch.isfinite(spec.run_reference(inputs)).all(), case.name
        assert any(isinstance(x, torch.Tensor) and x.is_floating_point() and not torch.equal(x, y)
                   for x, y in zip(inputs, plain, strict=True)), case.name


@pytest.mark.parametrize("name", ["layernorm", "rmsnorm"])
def test_norm_weights_are_not_trivial(name):
    spec = get_spec(name)
    inputs = spec.make_inputs(spec.shapes("cpu")[0], torch.float32, CPU, _gen())
    weight = inputs[1]
    assert not torch.allclose(weight, torch.ones_like(weight)), "an ignored weight would pass"
    if name == "layernorm":
        assert inputs[2].abs().max() > 0.01, "an ignored bias would pass"


def test_cross_entropy_has_ignored_rows_and_keeps_one():
    spec = get_spec("cross_entropy")
    _, targets = spec.make_inputs({"M": 512, "V": 100}, torch.float32, CPU, _gen())
    ignored = int((targets == IGNORE_INDEX).sum())
    assert 10 < ignored < 100
    assert targets[0] != IGNORE_INDEX


def test_attention_sets_cover_gqa_and_both_masks():
    spec = get_spec("flash_attention")
    shapes = spec.shapes()
    assert any(s["Hkv"] < s["H"] for s in shapes)
    assert {s["causal"] for s in shapes} == {True, False}
    q, k, v, causal, scale = spec.make_inputs({"B": 1, "H": 4, "Hkv": 2, "S": 8, "D": 16, "causal": True},
                                              torch.float32, CPU, _gen())
    assert k.shape[1] == 2 and scale == pytest.approx(0.25)
    out = spec.run_reference((q, k, v, causal, scale))
    # causal: the first query attends only to the first key, so its output is v[0] of its kv head
    assert torch.allclose(out[0, 0, 0], v[0, 0, 0], atol=1e-6)


def test_rotary_tables_match_positions():
    spec = get_spec("rotary_embedding")
    x, cos, sin = spec.make_inputs({"B": 1, "H": 1, "S": 4, "D": 8}, torch.float32, CPU, _gen())
    assert cos.shape == (4, 4) and torch.allclose(cos[0], torch.ones(4)) and torch.allclose(sin[0], torch.zeros(4))
    # position 0 is the identity rotation
    assert torch.allclose(spec.run_reference((x, cos, sin))[0, 0, 0], x[0, 0, 0].double())


def test_fused_mlp_allows_only_gemm_library_calls():
    spec = get_spec("fused_mlp")
    assert "mm" in spec.allowed_aten and "silu" not in spec.allowed_aten
    assert "_softmax" not in get_spec("softmax").allowed_aten
    assert "pow" not in get_spec("rmsnorm").allowed_aten


def test_reduced_precision_is_outside_fp32_tolerance():
    spec = get_spec("softmax")
    (x,) = spec.make_inputs({"M": 64, "N": 1024}, torch.float32, CPU, _gen())
    ref = spec.run_reference((x,))
    cheap = torch.softmax(x.bfloat16().float(), -1)
    failure = compare(cheap, ref, spec.tolerances[torch.float32])
    assert failure is not None and failure.check == "allclose"


# -- the eager baseline (KernelSpec.eager / eager_fn) -----------------------------------------------
EAGER_OVERRIDDEN = {"rmsnorm", "flash_attention", "cross_entropy"}


@pytest.mark.parametrize("name", KERNEL_TYPES)
def test_eager_fn_is_the_users_code_else_the_reference(name):
    spec = get_spec(name)
    if name in EAGER_OVERRIDDEN:
        assert spec.eager is not None and spec.eager_fn() is spec.eager and spec.eager is not spec.reference
    else:
        assert spec.eager is None and spec.eager_fn() is spec.reference


@pytest.mark.parametrize("name", KERNEL_TYPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_eager_matches_reference_on_cpu_shapes(name, dtype):
    """What users run today agrees with the reference within the spec's tolerance (a baseline that
    computed something else would make every speedup meaningless)."""
    spec = get_spec(name)
    if dtype not in spec.tolerances:
        pytest.skip(f"{name} does not run in {dtype}")
    for shape in spec.shapes("cpu"):
        for seed in range(3):
            inputs = spec.make_inputs(shape, dtype, CPU, _gen(seed))
            out, ref = spec.eager_fn()(*inputs), spec.run_reference(inputs)
            assert out.dtype == dtype, "eager runs in the input dtype"
            tol = spec.tolerance(dtype)
            if spec.output_dtype not in (None, dtype):
                # cross_entropy: F.cross_entropy returns the loss in the logits' dtype, where the spec
                # demands fp32. Eager is then right to the rounding of one scalar in its dtype.
                eps = torch.finfo(dtype).eps
                tol = Tolerance(atol=0.0, rtol=eps, rel_l2=eps)
            assert compare(out, ref, tol) is None, (name, shape, dtype, seed)


def test_eager_rmsnorm_and_attention_are_what_models_run():
    rms = get_spec("rmsnorm")
    # LlamaRMSNorm normalises in fp32: at std 1000, x^2 overflows fp16 in the reference run natively
    # (rsqrt(inf) = 0: all zeros), not in the eager baseline.
    inputs = rms.stress_cases[1].make_inputs({"M": 4, "N": 64}, torch.float16, CPU, _gen())
    ref, tol = rms.run_reference(inputs), rms.tolerance(torch.float16)
    assert compare(rms.eager_fn()(*inputs), ref, tol) is None and compare(rms.reference(*inputs), ref, tol)
    attn = get_spec("flash_attention")
    q, k, v, causal, scale = attn.make_inputs({"B": 1, "H": 4, "Hkv": 2, "S": 8, "D": 16, "causal": True},
                                              torch.float32, CPU, _gen())
    out = attn.eager_fn()(q, k, v, causal, scale)  # SDPA with enable_gqa: 4 query heads on 2 kv heads
    assert out.shape == q.shape and torch.allclose(out, attn.reference(q, k, v, causal, scale), atol=1e-5)


# The fp32 reference run natively multiplies x (std 1000) by cos and sin in fp32 and subtracts: where
# the two products cancel, their rounding (ulp(1000) = 6e-5) exceeds atol 1e-5 (up to 4.3e-4, 14-18 of
# 95904 elements at the odd shape; 1 element here). Reported to the lead, not changed in this pass.
def _stress_params():
    for name in KERNEL_TYPES:
        for case in get_spec(name).stress_cases:
            yield pytest.param(name, case.name, id=f"{name}-{case.name}")


@pytest.mark.parametrize(("name", "case_name"), list(_stress_params()))
def test_eager_fp32_passes_every_stress_case(name, case_name):
    """A stress case's fp32 bound must accept the eager baseline: a bound eager fails is not honest."""
    spec = get_spec(name)
    case = next(c for c in spec.stress_cases if c.name == case_name)
    for shape in spec.shapes("cpu"):
        for seed in range(3):
            inputs = case.make_inputs(shape, torch.float32, CPU, _gen(seed))
            out = spec.eager_fn()(*inputs)
            assert compare(out, spec.run_reference(inputs), spec.tolerance(torch.float32, case_name)) is None, \
                (shape, seed)


# -- stress-case tolerances ---------------------------------------------------------------------------
def test_tolerance_lookup_prefers_the_stress_case_bound():
    from autokernel_ci.specs.layernorm import LARGE_MEAN_FP32

    spec = get_spec("layernorm")
    assert spec.tolerance(torch.float32, "large_mean") is LARGE_MEAN_FP32
    assert spec.tolerance(torch.bfloat16, "large_mean") is spec.tolerances[torch.bfloat16]
    assert spec.tolerance(torch.float32, "tiny_variance") is spec.tolerances[torch.float32]
    assert spec.tolerance(torch.float32) is spec.tolerances[torch.float32]
    with pytest.raises(KeyError, match="no stress case"):
        spec.tolerance(torch.float32, "nope")
    overridden = [(n, c.name) for n in KERNEL_TYPES for c in get_spec(n).stress_cases if c.tolerances]
    assert overridden == [("layernorm", "large_mean"), ("rotary_embedding", "large_magnitude")], \
        "each override needs its measured reason in the spec"


def test_rotary_large_magnitude_bound_still_rejects_bf16_compute():
    spec = get_spec("rotary_embedding")
    case = next(c for c in spec.stress_cases if c.name == "large_magnitude")
    inputs = case.make_inputs(spec.shapes("cpu")[0], torch.float32, CPU, _gen(0))
    low = spec.eager_fn()(*(t.to(torch.bfloat16) if t.is_floating_point() else t for t in inputs)).float()
    failure = compare(low, spec.run_reference(inputs), spec.tolerance(torch.float32, "large_magnitude"))
    assert failure is not None and failure.check in ("allclose", "rel_l2"), failure


def _naive_layernorm(x, weight, bias, eps):
    """Single-pass E[x^2] - E[x]^2 in fp32: what the large_mean case exists to reject."""
    x32 = x.float()
    mean = x32.mean(-1, keepdim=True)
    var = ((x32 * x32).mean(-1, keepdim=True) - mean * mean).clamp_min(0)
    return (x32 - mean) * torch.rsqrt(var + eps) * weight + bias


def _two_pass_layernorm(x, weight, bias, eps):
    x32 = x.float()
    d = x32 - x32.mean(-1, keepdim=True)
    return d * torch.rsqrt((d * d).mean(-1, keepdim=True) + eps) * weight + bias


@pytest.mark.parametrize("shape", [{"M": 16, "N": 256}, {"M": 9, "N": 100}, {"M": 257, "N": 3000}], ids=str)
def test_layernorm_large_mean_fp32_bound_separates_honest_from_naive(shape):
    spec = get_spec("layernorm")
    case = next(c for c in spec.stress_cases if c.name == "large_mean")
    tol = spec.tolerance(torch.float32, "large_mean")
    inputs = case.make_inputs(shape, torch.float32, CPU, _gen())
    ref = spec.run_reference(inputs)
    assert compare(spec.eager_fn()(*inputs), ref, spec.tolerances[torch.float32]) is not None, \
        "eager fp32 fails the plain fp32 bound here: the override is needed"
    assert compare(spec.eager_fn()(*inputs), ref, tol) is None
    assert compare(_two_pass_layernorm(*inputs), ref, tol) is None
    naive = compare(_naive_layernorm(*inputs), ref, tol)
    assert naive is not None and naive.rel_l2 > 50 * tol.rel_l2
