"""Pure parts of the harness: environment scrubbing, statistics, keep/revert, physical floor,
tamper guard, fault classification, rendering. No worker process."""

from __future__ import annotations

import importlib

import pytest
import torch

from autokernel_ci.harness import calls, faults, guard, roofline, sandbox, timing
from autokernel_ci.harness.decide import decide
from autokernel_ci.harness.evaluator import fold_bench_checks
from autokernel_ci.harness.results import BenchResult, ShapeBench, StageResult, Status, Timing, Verdict
from autokernel_ci.render import render, render_bench, render_verdict
from autokernel_ci.specs import get_spec

# the module (its constants); `autokernel_ci.harness.decide` as an attribute is the function
decide_mod = importlib.import_module("autokernel_ci.harness.decide")


def test_scrubbed_env_keeps_toolchain_drops_secrets():
    parent = {"PATH": "/bin", "HOME": "/root", "CUDA_VISIBLE_DEVICES": "0", "TRITON_CACHE_DIR": "/c",
              "PYTHONPATH": "/p", "LD_LIBRARY_PATH": "/l", "GITHUB_TOKEN": "t", "GH_TOKEN": "t",
              "ACTIONS_ID_TOKEN_REQUEST_URL": "u", "OPENAI_API_KEY": "k", "MY_API_KEY": "k", "DB_PASSWORD": "p",
              "AWS_REGION": "eu", "AZURE_TENANT": "a", "ANTHROPIC_BASE_URL": "u", "TRITON_AUTH_TOKEN": "t",
              "GITHUB_WORKSPACE": "/w", "RANDOM_APP_SETTING": "x", "KINETO_LOG_LEVEL": "6"}
    env = sandbox.scrubbed_env(parent)
    assert set(env) == {"PATH", "HOME", "CUDA_VISIBLE_DEVICES", "TRITON_CACHE_DIR", "PYTHONPATH", "LD_LIBRARY_PATH",
                        "KINETO_LOG_LEVEL"}


@pytest.mark.parametrize(("samples", "median", "p20", "p80"), [
    ([5.0], 5.0, 5.0, 5.0),
    ([1.0, 2.0, 3.0, 4.0, 5.0], 3.0, 1.8, 4.2),
    ([10.0, 1.0, 1.0, 1.0, 1.0, 1.0], 1.0, 1.0, 1.0),
])
def test_summarize_median_and_percentiles(samples, median, p20, p80):
    t = timing.summarize(samples)
    assert (t.median_us, t.p20_us, t.p80_us, t.samples) == (pytest.approx(median), pytest.approx(p20),
                                                              pytest.approx(p80), len(samples))


def test_time_calls_interleaves_on_cpu():
    order = []
    t = timing.time_calls({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, torch.device("cpu"),
                          samples=4, warmup=0)
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert t["a"].samples == 4 and t["b"].samples == 4


@pytest.mark.parametrize(("cand", "best", "keep"), [
    (Timing(90, 89, 91, 50), Timing(100, 99, 101, 50), True),      # 10% faster, 2% spread
    (Timing(99.5, 99, 100, 50), Timing(100, 99.5, 100.5, 50), False),  # 0.5% < 1% floor
    (Timing(90, 80, 100, 50), Timing(100, 99, 101, 50), False),     # 10% faster but 20% spread
    (Timing(110, 109, 111, 50), Timing(100, 99, 101, 50), False),   # slower
])
def test_decide_keeps_only_beyond_noise(cand, best, keep):
    d = decide(cand, best)
    assert d.keep is keep, d.reason
    assert d.speedup == pytest.approx(best.median_us / cand.median_us, rel=1e-3)
    assert d.noise >= decide_mod.MIN_NOISE


def test_decide_rejects_nonpositive():
    with pytest.raises(ValueError, match="positive"):
        decide(Timing(0, 0, 0, 1), Timing(1, 1, 1, 1))


def test_physical_floor_and_fold():
    spec = get_spec("rmsnorm")
    shape = {"M": 8192, "N": 4096}
    floor = roofline.floor_us(spec, shape, torch.bfloat16)
    assert floor == pytest.approx(spec.bytes_moved(shape, torch.bfloat16) / 4800e9 * 1e6, rel=1e-6)
    assert roofline.below_floor(spec, shape, torch.bfloat16, floor * 1.2) is None
    problem = roofline.below_floor(spec, shape, torch.bfloat16, floor / 3)
    assert problem and "physical floor" in problem
    verdict = Verdict("k", "rmsnorm", "triton", "h", "cuda", Status.PASS,
                      stages=[StageResult("smoke", Status.PASS)])
    bench = BenchResult("k", "rmsnorm", "triton", "h", "cuda", "gpu",
                        checks={"below_physical_floor": f"fail: {problem}"})
    fold_bench_checks(verdict, bench)
    assert verdict.status is Status.FAIL and verdict.reason.startswith("bench: below_physical_floor")
    assert roofline.metric_value(spec, shape, torch.bfloat16, floor) == pytest.approx(4800, rel=1e-6)


def test_guard_detects_and_ignores_additions():
    import autokernel_ci.harness.stages as stages

    snap = guard.take_snapshot()
    assert guard.find_tampering(snap) == []
    original = torch.allclose
    stages.__dict__["brand_new_name"] = 1  # additions (lazy submodules) are not tampering
    try:
        torch.allclose = lambda *a, **k: True
        assert guard.find_tampering(snap) == ["torch.allclose was replaced"]
    finally:
        torch.allclose = original
        del stages.__dict__["brand_new_name"]
    assert guard.find_tampering(snap) == []


@pytest.mark.parametrize(("owner", "name"), [
    ("torch.profiler", "profile"), ("torch.profiler.profile", "__enter__"), ("torch.profiler.profile", "__exit__"),
    ("torch.profiler.profile", "events"), ("autokernel_ci.torch_profile", "torch_profile"),
])
def test_guard_sees_the_launch_counts_profiler_replaced(owner, name):
    """What calls.launch_tracker reads a GPU launch from: replacing any of it could fake one (profiler_spoof.py)."""
    obj = importlib.import_module(owner) if owner.startswith("autokernel_ci") else guard._resolve(owner)
    snap = guard.take_snapshot()
    own = name in vars(obj)  # profile.events is inherited: the patch shadows it, the restore deletes the shadow
    original = vars(obj).get(name)
    try:
        setattr(obj, name, lambda *a, **k: None)
        assert any(m.startswith(f"{owner}.{name} was replaced") for m in guard.find_tampering(snap))
    finally:
        if own:
            setattr(obj, name, original)
        else:
            delattr(obj, name)
    assert guard.find_tampering(snap) == []


@pytest.mark.parametrize(("exc", "status"), [
    (RuntimeError("boom"), Status.CRASH),
    (MemoryError(), Status.OOM),
    (RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"), Status.OOM),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory"), Status.OOM),
    (type("CompilationError", (Exception,), {})("bad"), Status.COMPILE_ERROR),
    (type("NVRTCError", (Exception,), {})("bad"), Status.COMPILE_ERROR),
])
def test_fault_classification(exc, status):
    assert faults.classify(exc) is status


def test_cuda_context_poisoning_detected():
    assert faults.poisons_cuda_context(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not faults.poisons_cuda_context(RuntimeError("shape mismatch"))


def test_render_verdict_and_bench():
    v = Verdict("k.py", "softmax", "triton", "abc", "cpu", Status.FAIL, reason="smoke: caching: x",
                stages=[StageResult("smoke", Status.FAIL, reason="caching: two inputs", cases=2)],
                hardening={"caching": "fail: two inputs"})
    text = render_verdict(v)
    assert "FAIL" in text and "caching" in text and "smoke" in text
    b = BenchResult("k.py", "softmax", "triton", "abc", "cpu", "cpu", note="CPU timings mean nothing",
                    rows=[ShapeBench({"M": 4, "N": 8}, "bfloat16", Timing(10, 9, 11, 5), eager=Timing(20, 19, 21, 5),
                                     value=1.5, speedup_vs_eager=2.0)])
    text = render_bench(b)
    assert "M4xN8" in text and "2.00x" in text and "mean nothing" in text
    assert render(b) == text
    with pytest.raises(TypeError):
        render(1)


LONG_REASON = ("input_mutated: input 'x' changed during the call: a kernel must not write to its inputs "
               "(use a separate output tensor; the harness compares every input to a copy)")


@pytest.mark.parametrize(("reason", "whole_shown"), [
    (LONG_REASON, True),  # cut in the table: shown whole below it
    ("compile: nvrtc failed\nkernel.cu(3): error: expected a ;", True),  # a second line the table leaves out
    ("caching: two inputs gave one output", False),  # fits the table: not repeated
])
def test_render_verdict_shows_a_cut_reason_whole(reason, whole_shown):
    v = Verdict("k.py", "softmax", "triton", "abc", "cpu", Status.FAIL, reason=f"smoke: {reason}",
                stages=[StageResult("smoke", Status.FAIL, reason=reason, cases=1)])
    text = render_verdict(v)
    assert (f"smoke: {reason}" in text) == whole_shown
    assert reason.splitlines()[0][:60] in text.splitlines()[4]  # the stage table's row keeps its first part


def test_roofline_reads_gpu_specs_not_a_local_table():
    """No GPU here: the bounds are the reference GPU's gpu_specs figures, labelled as such; the floor
    uses the datasheet (fp32 through tf32 tensor cores), the ceiling the measured figures."""
    from autokernel_ci.hardware import ceiling as hw_ceiling
    from autokernel_ci.hardware import load_spec

    assert not hasattr(roofline, "FALLBACK_CEILING_GBS") and not hasattr(roofline, "FLOOR_TFLOPS")
    h200 = load_spec(roofline.REFERENCE_GPU)
    rms, mm = get_spec("rmsnorm"), get_spec("matmul")
    c = roofline.ceiling(rms, torch.bfloat16)
    assert c.value == hw_ceiling("GB/s", torch.bfloat16, h200) == h200.measured.copy_gbs
    assert c.source.startswith(f"gpu_specs:{h200.key}") and "reference GPU" in c.source
    assert roofline.ceiling(mm, torch.bfloat16).value == hw_ceiling("TFLOP/s", torch.bfloat16, h200)
    shape = mm.model_shape()
    assert roofline.floor_us(mm, shape, torch.bfloat16) == pytest.approx(mm.flops(shape) / (h200.peak("bf16") * 1e6))
    assert roofline.floor_us(mm, shape, torch.float32) == pytest.approx(mm.flops(shape) / (h200.peak("tf32") * 1e6))


def test_decide_stays_the_function_after_its_submodule_is_imported():
    """Regression: the loop resolves "autokernel_ci.harness:decide" once per run; the second run in
    a process used to get the submodule autokernel_ci.harness.decide and crash every keep/revert."""
    import importlib

    from autokernel_ci.loop.workers import import_ref

    first = import_ref("autokernel_ci.harness:decide")
    importlib.import_module("autokernel_ci.harness.decide")  # the submodule, as evaluator.py imports it
    second = import_ref("autokernel_ci.harness:decide")
    assert callable(first) and second is first and second.__name__ == "decide"


@pytest.mark.parametrize(("dtype", "expected"), [
    (torch.int64, calls.POISON_INT), (torch.int32, calls.POISON_INT), (torch.int16, -32768),
    (torch.int8, -128), (torch.uint8, 255), (torch.bool, True),
])
def test_every_integer_scratch_buffer_is_poisoned_with_a_value_its_dtype_holds(dtype, expected):
    """A candidate's uint8 scratch (a TMA descriptor's bytes) once crashed the poisoning itself."""
    seen = {}

    def kernel(x):
        scratch = torch.empty(8, dtype=dtype)
        seen["scratch"] = scratch.clone()
        return x * 2

    result = calls.guarded_call(kernel, (torch.ones(4),), allowed_aten=frozenset({"empty", "clone", "mul"}),
                                arg_names=("x",))
    assert result.failure is None
    assert seen["scratch"].tolist() == [expected] * 8
