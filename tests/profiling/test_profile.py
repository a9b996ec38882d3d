"""The profiler's time accounting, classification of each example, and the profile CLI end to end."""

from __future__ import annotations

import json

import pytest
import torch
from profiling_helpers import MODELS, cli
from torch.autograd import DeviceType

from autokernel_ci.plan import Plan
from autokernel_ci.profiling import profiler
from autokernel_ci.profiling.classify import classify
from autokernel_ci.profiling.commands import profile_model_full
from autokernel_ci.profiling.planner import amdahl_gain, render_plan
from autokernel_ci.profiling.profiler import PROFILE_PASSES, TIME_SUM_TOLERANCE, Profile
from autokernel_ci.specs import KERNEL_TYPES, get_spec


@pytest.fixture(scope="module")
def llama_small():
    return profile_model_full(f'{MODELS / "llama.py"}:build_model(size="small")', dtype="fp32", device="cpu")


def test_time_is_counted_once_and_matches_the_forward(llama_small):
    """Operator self times sum to the profiled pass's wall time within the stated CPU tolerance: counting
    aten::linear and its aten::mm both (inclusive times) would give ~2x, dropping ops far less than 1x."""
    plan, profile = llama_small
    tol = TIME_SUM_TOLERANCE["cpu"]
    assert abs(profile.coverage - 1.0) <= tol, (profile.profiled_time_us, profile.profiled_wall_us, profile.passes)
    assert 1 <= profile.passes <= PROFILE_PASSES
    assert sum(o.time_us for o in plan.ops) == pytest.approx(plan.profiled_time_us, rel=1e-3)
    assert sum(o.share for o in plan.ops) == pytest.approx(1.0, abs=1e-3)


def _pass_with_coverage(coverage: float) -> Profile:
    return Profile("cpu", torch.float32, [], [], {}, model_time_us=100.0, profiled_time_us=100.0 * coverage,
                   profiled_wall_us=100.0)


@pytest.mark.parametrize("coverages,kept,passes", [
    ([0.97], 0.97, 1),  # in tolerance: one pass
    ([0.55, 0.9], 0.9, 2),  # a preemption between ops lowered the first pass: profiled again
    ([0.6, 0.7, 0.65], 0.7, 3),  # a model dominated by Python overhead stays out of tolerance: closest kept
    ([2.0, 1.98, 2.02], 1.98, 3),  # a double count shows in every pass: never hidden
])
def test_a_pass_out_of_tolerance_is_profiled_again(monkeypatch, coverages, kept, passes):
    queue = list(coverages)
    monkeypatch.setattr(profiler, "_profile_pass", lambda *a, **k: _pass_with_coverage(queue.pop(0)))
    profile = profiler.profile_forward(torch.nn.Identity(), (torch.zeros(2),), device="cpu", dtype=torch.float32)
    assert profile.coverage == pytest.approx(kept) and profile.passes == passes
    assert not queue


def test_llama_plan_has_the_expected_ops_and_shapes(llama_small):
    plan, _ = llama_small
    by_type = {o.kernel_type: o for o in plan.ops}
    for t in ("rmsnorm", "rotary_embedding", "flash_attention", "fused_mlp", "matmul", "cross_entropy"):
        assert t in by_type, [o.id for o in plan.ops]
    assert {"M": 256, "N": 256} in by_type["rmsnorm"].shapes
    assert next(o for o in plan.ops if o.kernel_type == "rmsnorm").calls == 5  # 2 layers x 2 + final norm
    assert plan.op("fused_mlp-0").shapes == [{"M": 256, "D": 256, "F": 688}]
    attn = plan.op("flash_attention-0").shapes[0]
    assert attn == {"B": 1, "H": 8, "Hkv": 4, "S": 256, "D": 32, "causal": True}
    rope_heads = sorted(o.shapes[0]["H"] for o in plan.ops if o.kernel_type == "rotary_embedding")
    assert rope_heads == [4, 8]  # k (GQA: 4 kv heads) and q
    assert {"M": 256, "K": 256, "N": 2048} in [s for o in plan.ops if o.kernel_type == "matmul" for s in o.shapes]
    assert plan.op("cross_entropy-0").shapes == [{"M": 256, "V": 2048}]
    # Only the MLP module claims its three linears: no matmul op lives inside the mlp.
    assert not any(".mlp." in m for o in plan.ops if o.kernel_type == "matmul" for m in o.modules)


def test_shapes_use_each_specs_keys(llama_small):
    plan, _ = llama_small
    for o in plan.ops:
        if o.kernel_type in KERNEL_TYPES:
            spec = get_spec(o.kernel_type)
            for s in o.shapes:
                spec.flops(s), spec.bytes_moved(s, torch.float32)  # raises KeyError on a wrong key


def test_amdahl_and_roofline(llama_small):
    plan, _ = llama_small
    assert amdahl_gain(0.6, 100.0, 100 / 1.5) == pytest.approx(1 / (0.4 + 0.6 / 1.5))
    assert amdahl_gain(0.6, 100.0, 100 / 1.5) > amdahl_gain(0.05, 100.0, 100 / 3)  # DESIGN.md §2's example
    for o in plan.targets():
        assert o.floor_us is not None and 0 < o.floor_us
        assert o.bound in ("memory", "compute")
        assert o.amdahl_gain >= 1.0
    assert plan.op("fused_mlp-0").bound == "compute" and plan.op("rmsnorm-0").bound == "memory"
    assert plan.gpu["ceiling_source"].startswith("fallback:cpu")
    assert [o.amdahl_gain for o in plan.targets()] == sorted((o.amdahl_gain for o in plan.targets()), reverse=True)


@pytest.mark.parametrize("ref,expected,absent", [
    ("gpt2.py:build_model", {"layernorm", "matmul", "flash_attention"}, {"rmsnorm", "fused_mlp"}),
    ('gpt2.py:build_model(attn="sdpa")', {"layernorm", "matmul", "flash_attention"}, {"rmsnorm"}),
    ("bert.py:build_model", {"layernorm", "matmul", "flash_attention"}, {"rmsnorm", "rotary_embedding"}),
    ('bert.py:build_model(attn="eager")', {"layernorm", "matmul", "flash_attention"}, {"softmax"}),
])
def test_classification_of_each_example(ref, expected, absent):
    plan, profile = profile_model_full(f"{MODELS}/{ref}", dtype="fp32", device="cpu")
    types = {o.kernel_type for o in plan.ops}
    assert expected <= types and not (absent & types), types
    attn = next(o for o in plan.ops if o.kernel_type == "flash_attention")
    assert attn.shapes[0]["causal"] is ref.startswith("gpt2")
    assert ("written out" in attn.name) is ("sdpa" not in ref and "gpt2" in ref or "eager" in ref)
    calls = classify(profile)
    assert sum(c.time_us for c in calls) == pytest.approx(profile.profiled_time_us - profile.unattributed_us)


def test_profile_cli_writes_a_plan(tmp_path):
    out = tmp_path / "plan.json"
    r = cli("profile", "--model", f"{MODELS / 'llama.py'}:build_model", "--device", "cpu", "--dtype", "bf16",
            "--json", str(out), "--top", "6")
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    assert data["version"] == 1 and data["dtype"] == "bf16" and len(data["ops"]) == 6
    assert all(op["id"] in r.stdout for op in data["ops"]) and "nine kernel types cover" in r.stdout
    plan = Plan.load(out)
    assert {o.dtype for o in plan.ops} == {"bf16"}
    assert render_plan(plan).splitlines()[0].startswith("model ")
    # the time line names both times it compares, so a ratio above 100% (profiler overhead) reads as what it is
    assert (f"operator time {plan.profiled_time_us:.1f} us under the profiler = "
            f"{plan.profiled_time_us / plan.model_time_us:.0%} of the {plan.model_time_us:.1f} us forward "
            "measured without it") in r.stdout


def _device_event(name: str, start_us: int, end_us: int, *, device: DeviceType, annotation: bool = False):
    from torch.autograd.profiler_util import FunctionEvent

    return FunctionEvent(id=0, name=name, thread=0, start_us=start_us, end_us=end_us, device_type=device,
                         is_user_annotation=annotation)


@pytest.mark.parametrize(("name", "device", "annotation", "expected_us"), [
    ("ampere_bf16_gemm", DeviceType.CUDA, False, 40.0),         # a kernel: counted
    ("Memcpy HtoD", DeviceType.CUDA, False, 40.0),              # a copy: counted
    ("autokernel.module.3", DeviceType.CUDA, True, 0.0),        # our scope mirrored on the GPU: not work
    ("aten::mm", DeviceType.CPU, False, 0.0),                   # host side: counted through its kernels
])
def test_device_time_counts_kernels_not_annotations(name, device, annotation, expected_us):
    from autokernel_ci.profiling.profiler import device_work_us

    assert device_work_us(_device_event(name, 10, 50, device=device, annotation=annotation)) == expected_us
