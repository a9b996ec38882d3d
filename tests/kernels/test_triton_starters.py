"""The nine Triton starter kernels (kernels/triton/<type>.py): contract, correctness and CONFIG points.

Runs on CPU through the Triton interpreter (tests/conftest.py sets TRITON_INTERPRET=1 without a GPU)
or on CUDA with AUTOKERNEL_TEST_DEVICE=cuda. Each output is checked with compare() against the spec's
high-precision reference while every tensor kernel_fn allocates is filled with NaN (an unwritten
element fails) and every aten op it calls is checked against the spec's allow-list; inputs are
checked unmodified and unaliased.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from starter_run import (
    DEVICE,
    HOPPER,
    KERNELS_DIR,
    PoisonAndRecord,
    launch_counts,
    load_fresh,
    make_inputs,
    run_and_check,
    starter_module,
)

from autokernel_ci import kernelfile
from autokernel_ci.agents.policy import ALLOWED_IMPORTS
from autokernel_ci.compare import compare
from autokernel_ci.specs import KERNEL_TYPES, get_spec

CONFIG_SAMPLES = 10  # CONFIG points per type: the cross products hold 100-4000 points, each ~0.2-2 s here
TYPES = [t for t in KERNEL_TYPES if (KERNELS_DIR / f"{t}.py").is_file()]

# Edge shapes left out in the interpreter, with the measured reason. None so far: the widest rows
# (softmax/reduce N=65537, cross_entropy V=131071) take under 3 s each through the looped variants.
SLOW_EDGE_SHAPES: dict[str, set[str]] = {}


def _cases(set_name: str) -> list:
    out = []
    for t in TYPES:
        spec = get_spec(t)
        for shape in spec.shape_sets[set_name]:
            label = spec.describe_shape(shape)
            for dtype in spec.dtypes:
                marks = [pytest.mark.skip(reason="slow in interpreter")] if label in SLOW_EDGE_SHAPES.get(t, ()) else []
                out.append(pytest.param(t, dict(shape), dtype, id=f"{t}-{label}-{str(dtype)[6:]}", marks=marks))
    return out


def test_poison_and_allow_list_catch_a_bad_kernel() -> None:
    """The checks above can fail: an unwritten element and a forbidden torch op are both caught."""
    spec = get_spec("softmax")
    x = make_inputs("softmax", {"M": 4, "N": 8}, torch.float32)
    with PoisonAndRecord() as mode:
        y = torch.empty_like(x[0])
        y[:, :-1] = torch.softmax(x[0][:, :-1], dim=-1)  # last column never written
    assert torch.isnan(y[:, -1]).all()
    assert compare(y, spec.run_reference(x), spec.tolerances[torch.float32]) is not None
    assert "_softmax" in mode.ops - spec.allowed_aten


@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_starter_exists_and_meets_contract(kernel_type: str) -> None:
    kf = kernelfile.load(KERNELS_DIR / f"{kernel_type}.py")
    assert kf.kernel_type == kernel_type and kf.backend == "triton"
    assert kf.summary, "the module docstring's first line is the one-line summary"
    assert all(kf.config[k] in v for k, v in kf.search_space.items()), "the default CONFIG lies inside SEARCH_SPACE"
    source = kf.source
    imports = {line.split()[1] for line in source.splitlines() if line.startswith(("import ", "from "))}
    # What the agent policy lets a candidate import (torch, Triton with its descriptors and Gluon, math,
    # functools for the per-device facts): a starter is a candidate the agent starts from.
    assert imports <= ALLOWED_IMPORTS, f"starters import only what the agent policy allows: {imports - ALLOWED_IMPORTS}"
    assert "autokernel_ci" not in source


@pytest.mark.parametrize(("kernel_type", "shape", "dtype"), _cases("cpu"))
def test_cpu_shapes(kernel_type: str, shape: dict, dtype: torch.dtype) -> None:
    run_and_check(starter_module(kernel_type), kernel_type, make_inputs(kernel_type, shape, dtype), dtype)


@pytest.mark.parametrize(("kernel_type", "shape", "dtype"), _cases("edge"))
def test_edge_shapes(kernel_type: str, shape: dict, dtype: torch.dtype) -> None:
    run_and_check(starter_module(kernel_type), kernel_type, make_inputs(kernel_type, shape, dtype), dtype)


def _strided(x: torch.Tensor, layout: str) -> torch.Tensor:
    """Same values, other strides: rows padded in memory, or the two layouts models produce."""
    if layout == "padded_rows":
        wide = torch.full((*x.shape[:-1], x.shape[-1] + 3), float("nan"), dtype=x.dtype, device=x.device)
        wide[..., : x.shape[-1]] = x
        return wide[..., : x.shape[-1]]
    if x.dim() == 4:  # [B,H,S,D] viewed from a [B,S,H,D] projection
        return x.transpose(1, 2).contiguous().transpose(1, 2)
    return x.transpose(-1, -2).contiguous().transpose(-1, -2)  # e.g. an nn.Linear weight's .T


@pytest.mark.parametrize("layout", ["padded_rows", "transposed"])
@pytest.mark.parametrize("kernel_type", TYPES)
def test_noncontiguous_inputs(kernel_type: str, layout: str) -> None:
    spec = get_spec(kernel_type)
    if not spec.noncontiguous_args:
        pytest.skip(f"the {kernel_type} spec lists no non-contiguous arguments")
    dtype = torch.float16
    inputs = list(make_inputs(kernel_type, dict(spec.shape_sets["cpu"][-1]), dtype, seed=1))
    for i in spec.noncontiguous_args:
        inputs[i] = _strided(inputs[i], layout)
        assert not inputs[i].is_contiguous()
    run_and_check(starter_module(kernel_type), kernel_type, tuple(inputs), dtype)


def _config_points(kernel_type: str) -> list:
    kf = kernelfile.load(KERNELS_DIR / f"{kernel_type}.py")
    points = list(kf.config_points())
    picked = random.Random(f"{kernel_type}-configs").sample(points, min(CONFIG_SAMPLES, len(points)))
    return [pytest.param(kernel_type, p, id=f"{kernel_type}-{i}") for i, p in enumerate(picked)]


@pytest.mark.parametrize(("kernel_type", "config"), [c for t in TYPES for c in _config_points(t)])
def test_config_points(kernel_type: str, config: dict, tmp_path: Path) -> None:
    """The search agent's path: rewrite CONFIG in the source, re-import, run; any point must be correct."""
    kf = kernelfile.load(KERNELS_DIR / f"{kernel_type}.py").with_config(config)
    assert kf.config == config
    path = tmp_path / f"{kernel_type}.py"
    path.write_text(kf.source)
    module = load_fresh(path)
    spec = get_spec(kernel_type)
    for shape in spec.shape_sets["cpu"]:
        dtype = spec.dtypes[0]
        run_and_check(module, kernel_type, make_inputs(kernel_type, dict(shape), dtype, seed=2), dtype)


def _variant_cases() -> list:
    out = []
    for t in TYPES:
        kf = kernelfile.load(KERNELS_DIR / f"{t}.py")
        for variant in kf.search_space.get("VARIANT", [kf.config.get("VARIANT")]):
            # the load policy is a second axis: every variant with and without it where the type has one
            for evict in kf.search_space.get("EVICT_FIRST", [None]):
                point = {k: v for k, v in (("VARIANT", variant), ("EVICT_FIRST", evict)) if v is not None}
                if point:
                    out.append(pytest.param(t, point, id=f"{t}-" + "-".join(f"{k}={v}" for k, v in point.items())))
    return out


@pytest.mark.parametrize(("kernel_type", "point"), _variant_cases())
def test_every_variant_on_cpu_and_edge_shapes(kernel_type: str, point: dict) -> None:
    """Each algorithm variant (and load policy) is correct on its own (the shape may still redirect it, e.g. wide
    rows)."""
    module = starter_module(kernel_type)
    spec = get_spec(kernel_type)
    saved = module.CONFIG
    module.CONFIG = {**saved, **point}  # kernel_fn reads the module's CONFIG on every call
    try:
        for shape in spec.shapes("cpu", "edge"):
            dtype = spec.dtypes[-1]
            run_and_check(module, kernel_type, make_inputs(kernel_type, shape, dtype, seed=3), dtype)
    finally:
        module.CONFIG = saved


# What each launcher asks of the device, and the value it must give from the fake properties below.
DEVICE_FACTS = [("reduce", "_processors", "sms"), ("flash_attention", "_sm_count", "sms"),
                ("flash_attention", "_smem_bytes", "smem"), ("fused_mlp", "_sm_count", "sms"),
                ("fused_mlp", "_smem_bytes", "smem"), ("matmul", "_device_facts", "both")]


@pytest.mark.parametrize(("kernel_type", "function", "expect"), DEVICE_FACTS)
def test_device_facts_are_read_once_a_device(kernel_type: str, function: str, expect: str, monkeypatch) -> None:
    """The launchers ask for the SM count / shared memory on every call; the property read (2.0 us on an H100
    host) happens once a device. A fresh module keeps the fake out of the shared modules' caches."""
    module = load_fresh(KERNELS_DIR / f"{kernel_type}.py")
    reads = []
    props = {0: SimpleNamespace(multi_processor_count=132, shared_memory_per_block_optin=232448),
             1: SimpleNamespace(multi_processor_count=78, shared_memory_per_block_optin=101376)}

    def fake_properties(device):
        reads.append(device.index)
        return props[device.index]

    monkeypatch.setattr(torch.cuda, "get_device_properties", fake_properties)
    fact = getattr(module, function)
    for index in (0, 0, 1, 0, 1):
        p = props[index]
        want = {"sms": p.multi_processor_count, "smem": p.shared_memory_per_block_optin,
                "both": (p.multi_processor_count, p.shared_memory_per_block_optin)}[expect]
        assert fact(torch.device("cuda", index)) == want
    assert reads == [0, 1]


@pytest.mark.parametrize("programs", [1, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reduce_persistent_programs_walk_every_row(programs: int, dtype: torch.dtype) -> None:
    """PERSISTENT k launches k programs (the interpreter counts one SM): each walks rows k apart, the last ones
    fewer; 7, 8 and 10 rows (not multiples of 3) catch a walk that stops early or runs past the end."""
    module = starter_module("reduce")
    saved = module.CONFIG
    module.CONFIG = {**saved, "VARIANT": "row", "PERSISTENT": programs}
    try:
        for shape in ({"M": 7, "N": 200}, {"M": 8, "N": 33}, {"M": 1, "N": 5}, {"B": 2, "M": 5, "N": 65}):
            run_and_check(module, "reduce", make_inputs("reduce", shape, dtype, seed=4), dtype)
    finally:
        module.CONFIG = saved


@pytest.mark.parametrize("kernel_type", TYPES)
def test_deterministic_and_input_dependent(kernel_type: str) -> None:
    module = starter_module(kernel_type)
    spec = get_spec(kernel_type)
    shape, dtype = dict(spec.shape_sets["cpu"][0]), spec.dtypes[0]
    inputs = make_inputs(kernel_type, shape, dtype, seed=4)
    first, second = module.kernel_fn(*inputs), module.kernel_fn(*inputs)
    assert torch.equal(first, second), f"{kernel_type}: two runs on the same input differ"
    other = module.kernel_fn(*make_inputs(kernel_type, shape, dtype, seed=5))
    assert not torch.equal(first, other), f"{kernel_type}: different inputs gave the same output (cached?)"


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("head_dim", [16, 32, 64, 96, 128])
def test_attention_head_dims_and_ragged_seq(head_dim: int, causal: bool) -> None:
    """Every supported head size, a sequence that is not a multiple of any block, and GQA 4:1."""
    if "flash_attention" not in TYPES:
        pytest.skip("no flash_attention starter")
    shape = {"B": 1, "H": 4, "Hkv": 1, "S": 37, "D": head_dim, "causal": causal}
    inputs = make_inputs("flash_attention", shape, torch.float16)
    run_and_check(starter_module("flash_attention"), "flash_attention", inputs, torch.float16)


@pytest.mark.parametrize("config", [{"BLOCK_M": 32, "BLOCK_N": 128}, {"BLOCK_M": 128, "BLOCK_N": 16}])
def test_attention_odd_set_with_unequal_blocks(config: dict) -> None:
    """S=333 (the spec's odd set), H=3 over Hkv=1, with query and key blocks of very different sizes."""
    if "flash_attention" not in TYPES:
        pytest.skip("no flash_attention starter")
    module = starter_module("flash_attention")
    saved = module.CONFIG
    module.CONFIG = {**saved, **config}
    try:
        for shape in get_spec("flash_attention").shape_sets["odd"]:
            run_and_check(module, "flash_attention", make_inputs("flash_attention", dict(shape), torch.bfloat16),
                          torch.bfloat16)
    finally:
        module.CONFIG = saved


@pytest.mark.skipif(not HOPPER, reason="VARIANT gluon_ws runs on sm_90 GPUs only (compiled for sm_90 on the CPU above)")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize(("shape", "config", "sm_scale", "gluon"), [
    ({"B": 2, "H": 4, "Hkv": 4, "S": 128, "D": 128, "causal": True}, {}, None, True),  # one key block
    ({"B": 1, "H": 4, "Hkv": 1, "S": 384, "D": 128, "causal": True}, {}, None, True),  # GQA, 3 blocks = the ring
    ({"B": 1, "H": 4, "Hkv": 2, "S": 1024, "D": 128, "causal": False}, {}, None, True),  # the ring wraps twice
    ({"B": 1, "H": 2, "Hkv": 2, "S": 1024, "D": 128, "causal": True}, {"num_stages": 2}, None, True),
    ({"B": 1, "H": 2, "Hkv": 1, "S": 512, "D": 128, "causal": True}, {"BLOCK_N": 64}, None, True),  # 2 diagonal
    ({"B": 1, "H": 2, "Hkv": 2, "S": 256, "D": 96, "causal": False}, {}, None, True),  # D padded to 128 by TMA
    ({"B": 1, "H": 2, "Hkv": 1, "S": 512, "D": 128, "causal": True}, {}, -0.125, True),  # negative scale
    ({"B": 1, "H": 2, "Hkv": 1, "S": 512, "D": 128, "causal": False}, {"REVERSE": False}, 0.0, True),  # zero scale
    ({"B": 1, "H": 4, "Hkv": 1, "S": 1024, "D": 128, "causal": True}, {"PINGPONG": True}, None, True),
    ({"B": 1, "H": 2, "Hkv": 2, "S": 128, "D": 128, "causal": True}, {"PINGPONG": True}, None, True),  # no loop
    # Persistent: 256 tiles over the H200's 132 SMs, so blocks take one or two tiles and the ring, q's buffer
    # and the turns run on from one tile to the next.
    ({"B": 1, "H": 16, "Hkv": 4, "S": 2048, "D": 128, "causal": True}, {"PERSISTENT": True}, None, True),
    ({"B": 2, "H": 8, "Hkv": 8, "S": 2048, "D": 128, "causal": False}, {"PERSISTENT": True, "BLOCK_N": 64}, None,
     True),
    ({"B": 1, "H": 16, "Hkv": 2, "S": 2048, "D": 128, "causal": True}, {"PERSISTENT": True, "PINGPONG": True},
     None, True),
    ({"B": 1, "H": 2, "Hkv": 1, "S": 512, "D": 64, "causal": True}, {}, None, False),  # D=64: the tma kernel
    ({"B": 1, "H": 2, "Hkv": 2, "S": 512, "D": 128, "causal": True}, {"BLOCK_M": 64}, None, False),
    ({"B": 1, "H": 2, "Hkv": 2, "S": 320, "D": 128, "causal": True}, {}, None, False),  # S not a multiple of 128
], ids=["one-block", "gqa-ring", "wrap", "2-stages", "64-keys", "d96", "neg-scale", "zero-scale", "pingpong",
        "pingpong-one-block", "persistent", "persistent-64-keys", "persistent-pingpong", "d64-falls-back",
        "bm64-falls-back", "s320-falls-back"])
def test_gluon_attention_on_hopper(shape: dict, config: dict, sm_scale: float | None, gluon: bool,
                                  dtype: torch.dtype) -> None:
    """VARIANT gluon_ws against the reference (the spec's inputs and its peaked_scores stress case), and the
    kernel that ran is the one the launcher's rule picks: the Gluon kernel, or the tma kernel where it falls
    back (each launch counted, so a fall-through after the Gluon launch would show)."""
    inputs = make_inputs("flash_attention", shape, dtype, seed=3)
    if sm_scale is not None:
        inputs = (*inputs[:4], sm_scale)
    peaked = next(c for c in get_spec("flash_attention").stress_cases if c.name == "peaked_scores")
    launches = launch_counts("flash_attention", {"VARIANT": "gluon_ws", **config}, [
        inputs, peaked.make_inputs(shape, dtype, DEVICE, torch.Generator(device=DEVICE).manual_seed(4))], dtype)
    assert launches == {"_attn_fwd_gluon_ws" if gluon else "_attn_fwd_tma": 2}


@pytest.mark.skipif(not HOPPER, reason="the gluon_ws fallbacks are those of an sm_90 GPU")
@pytest.mark.parametrize(("dtype", "layout", "kernel"), [
    (torch.float32, "contiguous", "_attn_fwd"),  # fp32: no TMA, the pointer kernel
    (torch.bfloat16, "transposed", "_attn_fwd_tma"),  # q/k/v/o viewed from [B, S, H, D]: the 4-d descriptors
], ids=["fp32-pointer", "strided-tma"])
def test_gluon_attention_fallbacks_on_hopper(dtype: torch.dtype, layout: str, kernel: str) -> None:
    shape = {"B": 1, "H": 4, "Hkv": 2, "S": 256, "D": 128, "causal": True}
    inputs = list(make_inputs("flash_attention", shape, dtype, seed=5))
    if layout == "transposed":
        inputs[:3] = [x.transpose(1, 2).contiguous().transpose(1, 2) for x in inputs[:3]]
    assert launch_counts("flash_attention", {"VARIANT": "gluon_ws"}, [tuple(inputs)], dtype) == {kernel: 1}


@pytest.mark.parametrize("kernel_type", ["flash_attention", "fused_mlp"])
def test_strided_inputs_beyond_the_spec(kernel_type: str) -> None:
    """Layouts models hand these kernels although the spec does not require them: q/k/v viewed from
    [B,S,H,D] projections, and nn.Linear weights stored transposed."""
    if kernel_type not in TYPES:
        pytest.skip(f"no {kernel_type} starter")
    spec = get_spec(kernel_type)
    inputs = list(make_inputs(kernel_type, dict(spec.shape_sets["cpu"][0]), torch.float16, seed=6))
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.dim() >= 2:
            inputs[i] = _strided(x, "transposed")
    run_and_check(starter_module(kernel_type), kernel_type, tuple(inputs), torch.float16)


def _stress_cases() -> list:
    return [pytest.param(t, case.name, dtype, id=f"{t}-{case.name}-{str(dtype)[6:]}")
            for t in TYPES for case in get_spec(t).stress_cases for dtype in get_spec(t).dtypes]


@pytest.mark.parametrize(("kernel_type", "case_name", "dtype"), _stress_cases())
def test_stress_cases(kernel_type: str, case_name: str, dtype: torch.dtype) -> None:
    """Stage 3's inputs (overflowing logits, mean 1000, tiny variance, ...) on the cpu shapes."""
    spec = get_spec(kernel_type)
    case = next(c for c in spec.stress_cases if c.name == case_name)
    for shape in spec.shapes("cpu"):
        gen = torch.Generator(device=DEVICE).manual_seed(7)
        run_and_check(starter_module(kernel_type), kernel_type, case.make_inputs(shape, dtype, DEVICE, gen), dtype)


# -- GPU compile without a GPU: every @triton.jit kernel lowered to sm_90 PTX/cubin -----------------
# The interpreter runs kernels as numpy, so it misses what only the compiler checks (loop-carried
# types, constexpr misuse, shared memory). Arguments are specialised as a real launch would (16-byte
# aligned pointers and sizes, unit last-dim strides) so the loads pipeline as they will on the H200.
_UNIT_STRIDES = {"s_ak", "s_bn", "s_cn", "s_xd", "s_gd", "s_ud", "s_hf", "s_qd", "s_kd", "s_vd", "s_od",
                 "sx_d", "sc_d", "ss_d"}
_FLOAT_ARGS = {"eps", "qk_scale"}
_FP32_PTRS = {"loss_ptr", "valid_ptr", "out_ptr"}
_GEMM = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "EVEN_K": True, "UPCAST": False}
_TMA_GEMM = {k: v for k, v in _GEMM.items() if k != "EVEN_K"}  # descriptors zero-fill ragged K
SM90_KERNELS = [
    ("softmax", "_softmax_row", "bf16", {"BLOCK": 8192}),
    ("softmax", "_softmax_multirow", "bf16", {"ROWS": 4, "BLOCK": 1024}),
    ("softmax", "_softmax_looped", "bf16", {"BLOCK": 4096}),
    ("rmsnorm", "_rmsnorm_row", "bf16", {"BLOCK": 4096}),
    ("rmsnorm", "_rmsnorm_multirow", "bf16", {"ROWS": 4, "BLOCK": 1024}),
    ("rmsnorm", "_rmsnorm_looped", "bf16", {"BLOCK": 4096}),
    ("layernorm", "_layernorm_row", "bf16", {"BLOCK": 4096}),
    ("layernorm", "_layernorm_multirow", "bf16", {"ROWS": 4, "BLOCK": 1024}),
    ("layernorm", "_layernorm_looped", "bf16", {"BLOCK": 4096}),
    ("reduce", "_sum_row", "bf16", {"BLOCK": 8192}),
    ("reduce", "_sum_multirow", "bf16", {"ROWS": 8, "BLOCK": 1024}),
    ("reduce", "_sum_looped", "bf16", {"BLOCK": 4096}),
    ("reduce", "_sum_row", "bf16", {"BLOCK": 8192, "EVICTION": "evict_first", "_ID": "evict_first"}),
    ("reduce", "_sum_looped", "bf16", {"BLOCK": 2048, "EVICTION": "evict_first", "_ID": "evict_first"}),
    ("reduce", "_sum_rows_persistent", "bf16", {"BLOCK": 8192, "EVICTION": "evict_first", "_ID": "evict_first"}),
    ("softmax", "_softmax_row", "bf16", {"BLOCK": 8192, "EVICTION": "evict_first", "_ID": "evict_first"}),
    ("rmsnorm", "_rmsnorm_multirow", "bf16", {"ROWS": 4, "BLOCK": 1024, "EVICTION": "evict_first",
                                              "_ID": "evict_first"}),
    ("layernorm", "_layernorm_row", "bf16", {"BLOCK": 4096, "EVICTION": "evict_first", "_ID": "evict_first"}),
    ("cross_entropy", "_ce_row_online", "bf16", {"BLOCK": 4096, "EVICTION": "evict_first", "_ID": "evict_first"}),
    ("rotary_embedding", "_rope_kernel", "bf16", {"BLOCK_S": 16, "BLOCK_H": 64, "HEADS": 4, "ACC": "fp32",
                                                  "EVICTION": "evict_first", "_ID": "evict_first"}),
    ("cross_entropy", "_ce_row_online", "bf16", {"BLOCK": 4096}),
    ("cross_entropy", "_ce_row_whole", "bf16", {"BLOCK": 32768}),
    ("cross_entropy", "_ce_mean", "fp32", {"BLOCK": 1024}),
    ("rotary_embedding", "_rope_kernel", "bf16", {"BLOCK_S": 16, "BLOCK_H": 64, "HEADS": 4, "ACC": "fp32"}),
    ("rotary_embedding", "_rope_kernel", "fp32", {"BLOCK_S": 16, "BLOCK_H": 64, "HEADS": 4, "ACC": "fp64"}),
    ("matmul", "_matmul_tiled", "bf16", {**_GEMM, "BLOCK_N": 256, "PRECISION": "tf32"}),
    ("matmul", "_matmul_persistent", "fp32", {**_GEMM, "EVEN_K": False, "PRECISION": "tf32x3"}),
    ("fused_mlp", "_gate_up_kernel", "bf16", {**_GEMM, "PRECISION": "tf32"}),
    # Tensor-descriptor variants: "_DESC" gives each descriptor's block shape (the interpreter runs
    # their Python, so a construct the compiler refuses shows only here or on a GPU).
    ("matmul", "_matmul_tma", "bf16", {**_TMA_GEMM, "BLOCK_N": 256, "PRECISION": "tf32", "B_NK": True,
                                       "TMA_STORE": True, "num_stages": 4,  # 196,640 B: the c tile reuses stages
                                       "_DESC": {"a_desc": [128, 64], "b_desc": [256, 64], "c_desc": [128, 256]}}),
    ("matmul", "_matmul_tma_persistent", "bf16", {**_TMA_GEMM, "PRECISION": "tf32", "B_NK": False, "FLATTEN": True,
                                                  "TMA_STORE": False,
                                                  "_DESC": {"a_desc": [128, 64], "b_desc": [64, 128],
                                                            "c_desc": [128, 128]}}),
    # "_CFG": the launcher's own BLOCK_K / stage choice (matmul._pipeline) for that CONFIG must fit.
    *[("matmul", f"_matmul_{cfg['VARIANT']}", "bf16",
       {**_TMA_GEMM, "PRECISION": "tf32", "B_NK": True, "TMA_STORE": cfg.get("TMA_STORE", True),
        **({"FLATTEN": cfg.get("FLATTEN", False)} if cfg["VARIANT"] == "tma_persistent" else {}),
        "_ID": f"launcher{i}", "_CFG": cfg,
        "_DESC": {"a_desc": [cfg["BLOCK_M"], 64], "b_desc": [cfg["BLOCK_N"], 64],
                  "c_desc": [cfg["BLOCK_M"], cfg["BLOCK_N"]]}})
      for i, cfg in enumerate([
          {"VARIANT": "tma_persistent", "BLOCK_M": 128, "BLOCK_N": 256, "num_stages": 5},
          {"VARIANT": "tma_persistent", "BLOCK_M": 128, "BLOCK_N": 256, "num_stages": 5, "TMA_STORE": False,
           "FLATTEN": True},
          {"VARIANT": "tma", "BLOCK_M": 256, "BLOCK_N": 256, "num_stages": 5},
          {"VARIANT": "tma_persistent", "BLOCK_M": 256, "BLOCK_N": 128, "num_stages": 5, "FLATTEN": True}])],
    ("fused_mlp", "_gate_up_tma", "bf16", {**_TMA_GEMM, "num_stages": 4,
                                           "_DESC": {"x_desc": [128, 64], "g_desc": [128, 64],
                                                     "u_desc": [128, 64], "h_desc": [128, 128]}}),
    ("flash_attention", "_attn_fwd_tma", "bf16", {"BLOCK_D": 128, "BLOCK_M": 128, "BLOCK_N": 64, "CAUSAL": True,
                                                  "UPCAST": False, "REVERSE": True, "FLAT": True, "_ID": "flat",
                                                  "NEG_SCALE": False,
                                                  "_DESC": {"q_desc": [128, 128], "k_desc": [64, 128],
                                                            "v_desc": [64, 128], "o_desc": [128, 128]}}),
    ("flash_attention", "_attn_fwd_tma", "fp16", {"BLOCK_D": 64, "BLOCK_M": 128, "BLOCK_N": 128, "CAUSAL": False,
                                                  "UPCAST": False, "REVERSE": False, "FLAT": False, "_ID": "4d",
                                                  "NEG_SCALE": True,
                                                  "_DESC": {"q_desc": [1, 1, 128, 64], "k_desc": [1, 1, 128, 64],
                                                            "v_desc": [1, 1, 128, 64], "o_desc": [1, 1, 128, 64]}}),
    ("flash_attention", "_attn_fwd", "bf16", {"HEAD_DIM": 128, "BLOCK_D": 128, "BLOCK_M": 128, "BLOCK_N": 64,
                                              "CAUSAL": True, "UPCAST": False, "PRECISION": "tf32",
                                              "NEG_SCALE": False}),
    # num_stages 2: what the launcher picks for an fp32 64x64 tile at D=128 (3 would need 256 KB).
    ("flash_attention", "_attn_fwd", "fp32", {"HEAD_DIM": 96, "BLOCK_D": 128, "BLOCK_M": 64, "BLOCK_N": 64,
                                              "CAUSAL": False, "UPCAST": False, "PRECISION": "tf32x3",
                                              "NEG_SCALE": False, "num_stages": 2}),
]
H100_SMEM_BYTES = 232448


def compile_sm90(kernel_type: str, kernel_name: str, dtype: str, constexprs: dict) -> int:
    """Compile one kernel for sm_90 in this process (which must not be in interpreter mode); shared bytes."""
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler import compile as triton_compile

    fn = getattr(starter_module(kernel_type), kernel_name)
    constexprs = dict(constexprs)
    stages = constexprs.pop("num_stages", 3)
    descriptors = constexprs.pop("_DESC", {})
    constexprs.pop("_ID", None)
    if "_CFG" in constexprs:  # BLOCK_K and stages as the launcher picks them for this CONFIG
        module = starter_module(kernel_type)
        cfg = {**module.CONFIG, **constexprs.pop("_CFG")}
        constexprs["BLOCK_K"], stages = module._pipeline(cfg, torch.bfloat16, 2, H100_SMEM_BYTES)
        descriptors = {k: [v[0], constexprs["BLOCK_K"]] if k != "c_desc" else v for k, v in descriptors.items()}
        for k in ("BLOCK_M", "BLOCK_N"):
            constexprs[k] = cfg[k]
    consts = {k: getattr(tl, {"fp32": "float32", "fp64": "float64"}[v]) if k == "ACC" else v
              for k, v in constexprs.items()}
    signature, attrs = {}, {}
    for i, p in enumerate(fn.params):
        if p.is_constexpr:
            signature[p.name] = "constexpr"
        elif p.name in descriptors:
            signature[p.name] = f"tensordesc<{dtype}{descriptors[p.name]}>"
        elif p.name in _UNIT_STRIDES:
            signature[p.name], consts[p.name] = "constexpr", 1
        elif p.name.endswith("_ptr"):
            signature[p.name] = "*i64" if p.name == "targets_ptr" else "*fp32" if p.name in _FP32_PTRS else f"*{dtype}"
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif p.name in _FLOAT_ARGS:
            signature[p.name] = "fp32"
        else:
            signature[p.name] = "i32"
            attrs[(i,)] = [["tt.divisibility", 16]]
    compiled = triton_compile(ASTSource(fn=fn, signature=signature, constexprs=consts, attrs=attrs),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": stages})
    assert compiled.asm["cubin"], "no cubin produced"
    if consts.get("EVICTION") == "evict_first":  # the policy must reach the loads (ld.global.L1::evict_first...)
        assert "evict_first" in compiled.asm["ptx"], "eviction_policy='evict_first' did not reach the PTX loads"
    return int(compiled.metadata.shared)


@pytest.fixture(scope="module")
def sm90_results() -> dict:
    """All SM90_KERNELS compiled in one child process without TRITON_INTERPRET (Triton decides
    interpreter mode when it is imported, so this process cannot compile)."""
    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    # A script's own folder, not the working directory, starts sys.path: this tree's package goes first, so the
    # child imports the autokernel_ci under test even where another checkout is the installed one.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, __file__, "--compile-sm90"], capture_output=True, text=True, env=env,
                          timeout=600, cwd=repo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# The Gluon attention kernel (VARIANT "gluon"): explicit wgmma, so it cannot run in the interpreter; compiled
# here for sm_90 at the shapes the launcher gives it (bf16 D=128 with 3 stages fills 229,408 of 232,448 B).
GLUON_SM90_ATTENTION = {
    "bf16-d128-causal-3stages": {"dtype": "bf16", "BLOCK_N": 128, "CAUSAL": True, "STAGES": 3},
    "fp16-d128-64keys-2stages": {"dtype": "fp16", "BLOCK_N": 64, "CAUSAL": False, "STAGES": 2},
    "bf16-pingpong": {"dtype": "bf16", "BLOCK_N": 128, "CAUSAL": True, "STAGES": 3, "PINGPONG": True},
}  # the kernel is the same for a persistent grid: only the launch's block count differs


def _compile_gluon_sm90(fn, dtype: str, blocks: dict[str, list[int]], consts: dict) -> dict:
    """Compile a gluon.jit kernel for sm_90 in this (non-interpreter) process; its descriptors get the launcher's
    default swizzled layouts for their block shapes. Facts of the PTX the tests check."""
    import re

    from triton.backends.compiler import GPUTarget
    from triton.compiler import compile as triton_compile
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    gl_dtype = {"bf16": gl.bfloat16, "fp16": gl.float16}[dtype]
    signature = {}
    for p in fn.params:
        if p.is_constexpr:
            signature[p.name] = "constexpr"
        elif p.name in blocks:
            layout = gl.NVMMASharedLayout.get_default_for(blocks[p.name], gl_dtype)
            signature[p.name] = f"tensordesc<{dtype}{blocks[p.name]},{layout!r}>"
        else:
            signature[p.name] = "fp32" if p.name == "qk_scale" else "i32"
    compiled = triton_compile(GluonASTSource(fn=fn, signature=signature, constexprs=consts),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    ptx = compiled.asm["ptx"]
    return {"shared": int(compiled.metadata.shared), "cubin": bool(compiled.asm["cubin"]),
            "wait_one": ptx.count("wgmma.wait_group.sync.aligned 1;"), "wgmma": ptx.count("wgmma.mma_async"),
            "wgmma_shapes": sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx))),
            "setmaxnreg": ptx.count("setmaxnreg"), "threads": 32 * int(compiled.metadata.num_warps)}


def compile_gluon_attention_sm90(case: dict) -> dict:
    """_attn_fwd_gluon_ws as the launcher calls it (128-row query blocks, D = 128): shared bytes, the PTX's
    overlap waits and register reallocation."""
    module = starter_module("flash_attention")
    consts = {k: v for k, v in case.items() if k != "dtype"} | {
        "BLOCK_M": 128, "BLOCK_D": 128, "REVERSE": True, "NEG_SCALE": False, "CONSUMER_REGS": module._WS_CONSUMER_REGS}
    rows = {"q_desc": 64, "k_desc": case["BLOCK_N"], "v_desc": case["BLOCK_N"], "o_desc": 64}
    return _compile_gluon_sm90(module._attn_fwd_gluon_ws, case["dtype"], {k: [r, 128] for k, r in rows.items()},
                               consts)


# The Gluon GEMM kernels (VARIANT "gluon" of the fused MLP and the matmul) at the stage counts their launchers give
# them on an H100/H200: the MLP's 128x128 bf16 takes 4 stages of 48 KB next to the 32 KB h tile, the matmul's
# 128x256 3 of 48 KB next to the 64 KB c tile. The matmul reads b's own [K, N] tiles N-major or b.T's K-major.
GLUON_SM90_GEMM = {
    "fused_mlp-bf16-128": {"type": "fused_mlp", "dtype": "bf16", "BLOCK_N": 128},
    "fused_mlp-fp16-64": {"type": "fused_mlp", "dtype": "fp16", "BLOCK_N": 64},
    "matmul-bf16-256-kn": {"type": "matmul", "dtype": "bf16", "BLOCK_N": 256, "B_NK": False},
    "matmul-fp16-128-nk": {"type": "matmul", "dtype": "fp16", "BLOCK_N": 128, "B_NK": True},
}


def compile_gluon_gemm_sm90(case: dict) -> dict:
    """The kernel as its launcher builds it, with its stage count and the wgmma width it should issue (the MLP's
    gate and up side by side: twice the tile)."""
    module = starter_module(case["type"])
    bn = case["BLOCK_N"]
    stages = module._gluon_stage_count({**module.CONFIG, "GL_BLOCK_N": bn}, 2, H100_SMEM_BYTES)
    consts = {"GROUP_M": module.CONFIG["GROUP_M"], "STAGES": stages, "CONSUMER_REGS": module._WS_CONSUMER_REGS}
    if case["type"] == "fused_mlp":
        fn, width = module._gate_up_gluon, 2 * bn
        blocks = {"x_desc": [128, 64], "g_desc": [bn, 64], "u_desc": [bn, 64], "h_desc": [64, bn]}
    else:
        fn, width = module._matmul_gluon, bn
        blocks = {"a_desc": [128, 64], "b_desc": [bn, 64] if case["B_NK"] else [64, bn], "c_desc": [64, bn]}
        consts["B_NK"] = case["B_NK"]
    return _compile_gluon_sm90(fn, case["dtype"], blocks, consts) | {"stages": stages, "width": width}


def _sm90_key(kernel_type: str, kernel_name: str, dtype: str, constexprs: dict) -> str:
    return ".".join([kernel_type, kernel_name, dtype] + ([constexprs["_ID"]] if "_ID" in constexprs else []))


@pytest.mark.parametrize(("kernel_type", "kernel_name", "dtype", "constexprs"),
                         [pytest.param(*k, id=_sm90_key(*k).split(".", 1)[1]) for k in SM90_KERNELS])
def test_compiles_for_sm90(kernel_type: str, kernel_name: str, dtype: str, constexprs: dict,
                           sm90_results: dict) -> None:
    if kernel_type not in TYPES:
        pytest.skip(f"no {kernel_type} starter")
    result = sm90_results[_sm90_key(kernel_type, kernel_name, dtype, constexprs)]
    assert isinstance(result, int), f"sm_90 compile failed: {result}"
    assert result <= H100_SMEM_BYTES, f"{result} B of shared memory > {H100_SMEM_BYTES}"


@pytest.mark.parametrize("case_id", sorted(GLUON_SM90_ATTENTION))
def test_gluon_attention_compiles_for_sm90(case_id: str, sm90_results: dict) -> None:
    """The sm_90 Gluon attention lowers to wgmma with the overlap in place (one `wgmma.wait_group 1` a consumer
    warpgroup: the scores are waited for while P V may still run), three warpgroups (two consumers and the load
    warp's), registers moved from the load warp to the consumers, and shared memory one block can have."""
    result = sm90_results[f"gluon.{case_id}"]
    assert isinstance(result, dict), f"sm_90 Gluon compile failed: {result}"
    assert result["cubin"], "no cubin produced"
    assert result["shared"] <= H100_SMEM_BYTES, f"{result['shared']} B of shared memory > {H100_SMEM_BYTES}"
    assert result["wait_one"] == 2, f"expected one wgmma.wait_group 1 a consumer warpgroup, found {result['wait_one']}"
    assert result["wgmma"] > 0, "no wgmma.mma_async in the PTX"
    assert result["threads"] == 384, f"expected 3 warpgroups (384 threads), got {result['threads']}"
    assert result["setmaxnreg"] > 0, "the warp-specialised kernel reallocates no registers"


@pytest.mark.parametrize("case_id", sorted(GLUON_SM90_GEMM))
def test_gluon_gemm_compiles_for_sm90(case_id: str, sm90_results: dict) -> None:
    """The Gluon GEMM kernels issue one wgmma shape (the MLP's gate and up as one of twice GL_BLOCK_N's width,
    m64n256k16 at 128), keep one wgmma in flight while they issue the next in each of their two consumer
    warpgroups, have three warpgroups with registers moved to the consumers, and fit one block's shared memory
    with two stages at least."""
    result = sm90_results[f"gluon_gemm.{case_id}"]
    assert isinstance(result, dict), f"sm_90 Gluon compile failed: {result}"
    assert result["cubin"], "no cubin produced"
    assert result["wgmma_shapes"] == [f"m64n{result['width']}k16"], result["wgmma_shapes"]
    assert result["stages"] >= 2, f"only {result['stages']} stage(s) fit"
    assert result["shared"] <= H100_SMEM_BYTES, f"{result['shared']} B of shared memory > {H100_SMEM_BYTES}"
    # Two a consumer warpgroup: after a tile's first k step (it waits for nothing) and in its k loop.
    assert result["wait_one"] == 4, f"expected two wgmma.wait_group 1 a consumer warpgroup, found {result['wait_one']}"
    assert result["threads"] == 384, f"expected 3 warpgroups (384 threads), got {result['threads']}"
    assert result["setmaxnreg"] > 0, "the warp-specialised kernel reallocates no registers"


def _compile_error(exc: Exception) -> str:
    """A failed sm_90 compile as the parametrized test reports it: Triton's error names the call site; the cause
    (e.g. "expected 2 offsets") is chained."""
    cause = f" (cause: {str(exc.__cause__)[-800:]})" if exc.__cause__ else ""
    return f"{type(exc).__name__}: {str(exc)[:1500]}{cause}"


if __name__ == "__main__" and sys.argv[1:] == ["--compile-sm90"]:
    jobs = [(_sm90_key(*kernel), compile_sm90, kernel) for kernel in SM90_KERNELS if kernel[0] in TYPES]
    for prefix, compile_fn, cases in (("gluon", compile_gluon_attention_sm90, GLUON_SM90_ATTENTION),
                                      ("gluon_gemm", compile_gluon_gemm_sm90, GLUON_SM90_GEMM)):
        jobs += [(f"{prefix}.{case_id}", compile_fn, (case,)) for case_id, case in cases.items()]
    results: dict[str, object] = {}
    for key, compile_fn, args in jobs:
        try:
            results[key] = compile_fn(*args)
        except Exception as exc:  # reported per kernel by the parametrized test
            results[key] = _compile_error(exc)
    print(json.dumps(results))
