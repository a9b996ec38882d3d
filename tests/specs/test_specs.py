"""The nine specs: complete, consistent, and their inputs realistic (DESIGN.md §4)."""

import pytest
import torch

from autokernel_ci.compare import compare
from autokernel_ci.specs import KERNEL_TYPES, SPECS, get_spec
from autokernel_ci.specs.base import SHAPE_SET_NAMES
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
