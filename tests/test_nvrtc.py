"""autokernel_ci.nvrtc: cache key, option canonicalisation, include discovery, argument typing, compile
errors that name the line (nvcc here; NVRTC too where libnvrtc loads), and a real launch on a GPU."""

from __future__ import annotations

import shutil

import pytest
import torch

from autokernel_ci import nvrtc

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

GOOD = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void scale_f32(float* y, const float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * SCALE;
}
extern "C" __global__ void scale_bf16(__nv_bfloat16* y, const __nv_bfloat16* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2bfloat16(__bfloat162float(x[i]) * SCALE);
}
"""
BROKEN_LINE = 5  # the line of BROKEN that lacks its semicolon
BROKEN = """#include <cuda_fp16.h>

extern "C" __global__ void broken(float* y) {
    const int i = threadIdx.x;
    y[i] = 1.0f
}
"""


def _nvrtc_loads() -> bool:
    try:
        nvrtc._nvrtc_compile("extern \"C\" __global__ void k() {}", [], "sm_90", "probe.cu")
        return True
    except Exception:  # noqa: BLE001 - no libnvrtc on this machine
        return False


needs_nvrtc = pytest.mark.skipif(not _nvrtc_loads(), reason="libnvrtc not loadable (pip install nvidia-cuda-nvrtc)")


# -- cache key and options -------------------------------------------------------------------------
def test_cache_key_is_stable_and_covers_source_options_arch_and_toolchain():
    base = nvrtc.cache_key(GOOD, ["-std=c++17", "-DSCALE=2"], "sm_90", "t1")
    assert base == nvrtc.cache_key(GOOD, ["-std=c++17", "-DSCALE=2"], "sm_90", "t1")
    assert len(base) == 64 and int(base, 16) >= 0
    variants = {
        nvrtc.cache_key(GOOD + " ", ["-std=c++17", "-DSCALE=2"], "sm_90", "t1"),
        nvrtc.cache_key(GOOD, ["-std=c++17", "-DSCALE=3"], "sm_90", "t1"),
        nvrtc.cache_key(GOOD, ["-std=c++17", "-DSCALE=2"], "sm_80", "t1"),
        nvrtc.cache_key(GOOD, ["-std=c++17", "-DSCALE=2"], "sm_90", "t2"),
    }
    assert base not in variants and len(variants) == 4


def test_options_are_canonical_so_equal_builds_share_a_key():
    a = nvrtc.option_strings({"B": 2, "A": True})
    b = nvrtc.option_strings({"A": 1, "B": 2})
    assert a == b == ["-std=c++17", "-DA=1", "-DB=2"]


@pytest.mark.parametrize("defines", [{"A; rm -rf /": 1}, {"A": "1 -o /etc/passwd"}, {"A": "$(id)"}])
def test_defines_that_are_not_plain_tokens_are_refused(defines):
    with pytest.raises(ValueError, match="define"):
        nvrtc.option_strings(defines)


# -- include discovery -----------------------------------------------------------------------------
def test_include_dirs_hold_the_fp16_and_bf16_headers():
    nvrtc.include_dirs.cache_clear()
    dirs = nvrtc.include_dirs()
    if not dirs:
        pytest.skip("no CUDA headers on this machine")
    from pathlib import Path

    for name in ("cuda_fp16.h", "cuda_bf16.h"):
        assert (Path(dirs[0]) / name).is_file()


def test_explicit_include_dir_comes_first_and_dirs_without_headers_are_ignored(tmp_path, monkeypatch):
    good = tmp_path / "good"
    good.mkdir()
    (good / "cuda_fp16.h").write_text("")
    (good / "cuda_bf16.h").write_text("")
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("AUTOKERNEL_CUDA_INCLUDE", f"{empty}:{good}")
    nvrtc.include_dirs.cache_clear()
    try:
        dirs = nvrtc.include_dirs()
        assert dirs[0] == str(good.resolve())
        assert str(empty.resolve()) not in dirs
    finally:
        nvrtc.include_dirs.cache_clear()


# -- launch arguments (checked before anything reaches the driver) ----------------------------------
def test_bare_python_scalars_are_refused_with_the_fix():
    with pytest.raises(nvrtc.LaunchError, match="i32"):
        nvrtc.kernel_args([7], 0)
    with pytest.raises(nvrtc.LaunchError, match="f32"):
        nvrtc.kernel_args([0.5], 0)


def test_typed_scalars_pass_and_range_is_checked():
    out = nvrtc.kernel_args([nvrtc.i32(3), nvrtc.i64(2**40), nvrtc.f32(0.5), None], 0)
    assert out[0].value == 3 and out[1].value == 2**40 and out[2].value == 0.5 and out[3] == 0
    with pytest.raises(nvrtc.LaunchError, match="int32"):
        nvrtc.i32(2**31)


def test_cpu_tensor_is_refused():
    with pytest.raises(nvrtc.LaunchError, match="cpu"):
        nvrtc.kernel_args([torch.zeros(4)], 0)


# -- nvcc compile check ----------------------------------------------------------------------------
@needs_nvcc
def test_compile_check_lists_the_extern_c_kernels_and_applies_defines():
    result = nvrtc.compile_check(GOOD, "sm_90", defines={"SCALE": 2})
    assert result.kernels == ("scale_bf16", "scale_f32")
    assert result.cubin_bytes > 0
    with pytest.raises(nvrtc.CompileError):  # SCALE undefined: the define really reaches the compiler
        nvrtc.compile_check(GOOD, "sm_90")


@needs_nvcc
def test_compile_error_names_the_line():
    with pytest.raises(nvrtc.CompileError) as info:
        nvrtc.compile_check(BROKEN, "sm_90", source_name="broken.cu")
    err = info.value
    assert BROKEN_LINE in err.lines or BROKEN_LINE + 1 in err.lines  # nvcc reports the missing ';' at the next token
    assert f"line {err.lines[0]}" in str(err) and "broken.cu" in str(err)
    assert "error" in err.log


def test_compile_check_refuses_odd_arch_and_file_names():
    with pytest.raises(ValueError, match="arch"):
        nvrtc.compile_check(GOOD, "sm_90; rm -rf /")
    with pytest.raises(ValueError, match="source_name"):
        nvrtc.compile_check(GOOD, source_name="../x.cu")


# -- NVRTC (runs wherever libnvrtc loads; no GPU needed to compile) --------------------------------
@needs_nvrtc
def test_nvrtc_builds_the_same_source_and_caches_in_memory_and_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv(nvrtc.CACHE_ENV, str(tmp_path))
    nvrtc.clear_cache()
    first = nvrtc.build(GOOD, defines={"SCALE": 2}, arch="sm_90")
    assert first.origin == ""
    assert sorted(nvrtc.elf_function_symbols(first.cubin)) == ["scale_bf16", "scale_f32"]
    assert nvrtc.build(GOOD, defines={"SCALE": 2}, arch="sm_90") is first  # in-process hit
    assert (tmp_path / f"{first.key}.cubin").is_file()
    nvrtc.clear_cache()
    again = nvrtc.build(GOOD, defines={"SCALE": 2}, arch="sm_90")
    assert again.origin == "disk" and again.cubin == first.cubin
    nvrtc.clear_cache()


@needs_nvrtc
def test_a_repeated_build_skips_the_cache_key_and_other_defines_still_rebuild(tmp_path, monkeypatch):
    """Kernel files build on every launch: a hit must not hash the source again (~40 us, more than a
    memory-bound kernel at the 7B shapes), yet any change of defines or arch must miss."""
    monkeypatch.setenv(nvrtc.CACHE_ENV, str(tmp_path))
    nvrtc.clear_cache()
    first = nvrtc.build(GOOD, defines={"SCALE": 2}, arch="sm_90")
    real_key = nvrtc.cache_key
    monkeypatch.setattr(nvrtc, "cache_key", lambda *a, **k: pytest.fail("cache_key computed on a repeated build"))
    assert nvrtc.build(GOOD, defines={"SCALE": 2}, arch="sm_90") is first
    monkeypatch.setattr(nvrtc, "cache_key", real_key)
    other = nvrtc.build(GOOD, defines={"SCALE": 3}, arch="sm_90")
    assert other is not first and other.key != first.key
    assert nvrtc.build(GOOD, defines={"SCALE": 2}, arch="sm_80").key != first.key
    nvrtc.clear_cache()


@needs_nvrtc
def test_nvrtc_compile_error_names_the_line(monkeypatch):
    monkeypatch.setenv(nvrtc.CACHE_ENV, "off")
    with pytest.raises(nvrtc.CompileError) as info:
        nvrtc.build(BROKEN, arch="sm_90", source_name="broken.cu")
    assert BROKEN_LINE in info.value.lines or BROKEN_LINE + 1 in info.value.lines
    assert "NVRTC" in str(info.value) and "broken.cu" in str(info.value)


# -- PRELUDE (the device helpers the starters share) -----------------------------------------------
USES_PRELUDE = r"""
template <typename T, int VEC>
__device__ __forceinline__ void scale_rows(T* __restrict__ y, const T* __restrict__ x, int n) {
    __shared__ float red[32];
    using V = Vec<T, VEC>;
    float s = 0.f;
    for (int i = threadIdx.x; i < n / VEC; i += blockDim.x) {
        const V v = reinterpret_cast<const V*>(x)[i];
        for (int k = 0; k < VEC; ++k) s += to_float(v.v[k]);
    }
    s = group_sum<8>(s, red) + warp_sum(s) + (s == -INFINITY ? 1.f : 0.f);
    for (int i = threadIdx.x; i < n / VEC; i += blockDim.x) {
        V o;
        for (int k = 0; k < VEC; ++k) o.v[k] = from_float<T>(s);
        reinterpret_cast<V*>(y)[i] = o;
    }
}
extern "C" __global__ void prelude_f32(float* y, const float* x, int n) { scale_rows<float, 4>(y, x, n); }
extern "C" __global__ void prelude_f16(__half* y, const __half* x, int n) { scale_rows<__half, 8>(y, x, n); }
extern "C" __global__ void prelude_bf16(__nv_bfloat16* y, const __nv_bfloat16* x, int n) {
    scale_rows<__nv_bfloat16, 8>(y, x, n);
}
"""


def test_prelude_is_documented_and_restarts_line_numbers_at_its_end():
    assert nvrtc.PRELUDE.rstrip().endswith("#line 1")
    for name in ("float to_float(", "T from_float(", "struct alignas(sizeof(T) * N) Vec", "float warp_sum(",
                 "float group_sum(", "#define INFINITY", "#include <cuda_fp16.h>", "#include <cuda_bf16.h>"):
        assert name in nvrtc.PRELUDE


@needs_nvcc
def test_prelude_helpers_compile_for_every_dtype_with_nvcc():
    result = nvrtc.compile_check(nvrtc.PRELUDE + USES_PRELUDE, "sm_90")
    assert result.kernels == ("prelude_bf16", "prelude_f16", "prelude_f32")


@needs_nvcc
def test_compile_error_after_the_prelude_names_the_line_of_the_kernels_own_text():
    with pytest.raises(nvrtc.CompileError) as info:
        nvrtc.compile_check(nvrtc.PRELUDE + BROKEN, "sm_90", source_name="broken.cu")
    assert BROKEN_LINE in info.value.lines or BROKEN_LINE + 1 in info.value.lines


@needs_nvrtc
def test_prelude_compiles_through_nvrtc_and_error_lines_skip_it(monkeypatch):
    monkeypatch.setenv(nvrtc.CACHE_ENV, "off")
    cubin = nvrtc._nvrtc_compile(nvrtc.PRELUDE + USES_PRELUDE, nvrtc.option_strings(), "sm_90", "prelude.cu")
    assert sorted(nvrtc.elf_function_symbols(cubin)) == ["prelude_bf16", "prelude_f16", "prelude_f32"]
    with pytest.raises(nvrtc.CompileError) as info:
        nvrtc.build(nvrtc.PRELUDE + BROKEN, arch="sm_90", source_name="broken.cu")
    assert BROKEN_LINE in info.value.lines or BROKEN_LINE + 1 in info.value.lines


# -- on a GPU: build, launch on torch's stream, check the numbers ---------------------------------
@needs_gpu
@pytest.mark.parametrize("dtype,name", [(torch.float32, "scale_f32"), (torch.bfloat16, "scale_bf16")])
@pytest.mark.parametrize("n", [1, 1000, 4097])
def test_launch_on_torch_tensors(dtype, name, n):
    x = torch.randn(n, device="cuda").to(dtype)
    y = torch.full_like(x, float("nan"))
    kernel = nvrtc.compile_kernel(GOOD, name, defines={"SCALE": 3})
    nvrtc.launch(kernel, grid=((n + 255) // 256,), block=(256,), args=(y, x, nvrtc.i32(n)))
    torch.cuda.synchronize()
    torch.testing.assert_close(y, (x.float() * 3).to(dtype))


@needs_gpu
def test_a_repeated_compile_kernel_is_one_lookup_and_other_defines_or_a_cleared_cache_miss(monkeypatch):
    """Kernel files compile on every call: a hit must not reach build() (5.4 us an H100 call with Module.kernel)."""
    first = nvrtc.compile_kernel(GOOD, "scale_f32", defines={"SCALE": 5})
    monkeypatch.setattr(nvrtc, "build", lambda *a, **k: pytest.fail("build() reached on a repeated compile"))
    assert nvrtc.compile_kernel(GOOD, "scale_f32", defines={"SCALE": 5}) is first
    monkeypatch.undo()
    assert nvrtc.compile_kernel(GOOD, "scale_f32", defines={"SCALE": 6}) is not first
    assert nvrtc.compile_kernel(GOOD, "scale_bf16", defines={"SCALE": 5}).name == "scale_bf16"
    assert first.device == torch.cuda.current_device()
    nvrtc.clear_cache()
    assert nvrtc.compile_kernel(GOOD, "scale_f32", defines={"SCALE": 5}) is not first


@needs_gpu
@needs_nvrtc
def test_a_kernel_built_for_another_arch_is_refused_before_the_driver_loads_it():
    other = "sm_80" if nvrtc.device_arch() != "sm_80" else "sm_90"
    module = nvrtc.build(GOOD, defines={"SCALE": 2}, arch=other)
    refusal = f"built for {other}, device {torch.cuda.current_device()} is {nvrtc.device_arch()}"
    with pytest.raises(nvrtc.LaunchError, match=refusal):
        module.kernel("scale_f32")
    assert module._object is None  # the cubin never reached the driver


@needs_gpu
def test_launches_go_to_torchs_current_stream_of_the_moment():
    side = torch.cuda.Stream()
    default_handle = torch.cuda.current_stream().cuda_stream
    with torch.cuda.stream(side):
        assert int(nvrtc._stream(torch.cuda.current_device()).handle) == side.cuda_stream
        x = torch.randn(3000, device="cuda")
        y = torch.full_like(x, float("nan"))
        nvrtc.launch(nvrtc.compile_kernel(GOOD, "scale_f32", defines={"SCALE": 3}), grid=(12,), block=(256,),
                     args=(y, x, nvrtc.i32(3000)))
        side.synchronize()  # the side stream alone: had the kernel gone elsewhere, y could still be NaN
        torch.testing.assert_close(y, x * 3)
    assert int(nvrtc._stream(torch.cuda.current_device()).handle) == default_handle


def test_a_launch_config_is_built_once_a_geometry_and_the_cache_stays_bounded(monkeypatch):
    core = nvrtc._core()
    monkeypatch.setattr(nvrtc, "_CONFIGS", {})
    first = nvrtc._launch_config(core, (4,), (128,), 0)
    assert nvrtc._launch_config(core, [4], [128], 0) is first  # a list and a tuple are the same geometry
    assert tuple(first.grid) == (4, 1, 1) and tuple(first.block) == (128, 1, 1)
    assert nvrtc._launch_config(core, (4,), (128,), 1024) is not first  # shared memory is part of it
    with pytest.raises(nvrtc.LaunchError, match="grid=.0"):
        nvrtc._launch_config(core, (0,), (128,), 0)
    monkeypatch.setattr(nvrtc, "LAUNCH_CONFIG_CACHE_SIZE", 3)
    for blocks in range(1, 8):
        nvrtc._launch_config(core, (blocks,), (32,), 0)
        assert len(nvrtc._CONFIGS) <= 3


def test_remembered_makes_once_a_key_with_its_args_and_empties_a_full_store():
    store, made = {}, []

    def make(*args):
        made.append(args)
        return list(args)

    first = nvrtc.remembered(store, "a", make, 1, 2, size=2)
    assert nvrtc.remembered(store, "a", make, 9, size=2) is first and made == [(1, 2)]  # a hit never calls make
    nvrtc.remembered(store, "b", make, 3, size=2)
    nvrtc.remembered(store, "c", make, 4, size=2)  # the store held 2: emptied, then "c"
    assert set(store) == {"c"} and made == [(1, 2), (3,), (4,)]
    assert nvrtc.remembered(store, "a", make, 5, size=2) == [5]  # made again after the clear


@needs_gpu
def test_sm_count_is_the_device_property():
    device = torch.device("cuda")
    assert nvrtc.sm_count(device) == torch.cuda.get_device_properties(device).multi_processor_count > 0
    assert nvrtc.sm_count(torch.device("cuda", torch.cuda.current_device())) == nvrtc.sm_count(device)


BIG_SHARED = r"""
extern "C" __global__ void reverse_through_shared(float* out, const float* in, int n) {
    extern __shared__ float buf[];  // n floats: more than the 48 KiB a launch gets without opting in
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = in[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[n - 1 - i];
}
"""


@needs_gpu
@pytest.mark.parametrize("kib", [16, 100, 200])
def test_launch_with_more_than_48_kib_of_dynamic_shared_memory(kib):
    _reverse_through_shared(BIG_SHARED, "reverse_through_shared", kib * 1024 // 4)


def _reverse_through_shared(source: str, name: str, n: int) -> None:
    """Launch `name` (it reverses n floats through n * 4 bytes of dynamic shared memory) and check its output."""
    x = torch.randn(n, device="cuda")
    y = torch.full_like(x, float("nan"))
    kernel = nvrtc.compile_kernel(source, name)
    nvrtc.launch(kernel, grid=(1,), block=(256,), args=(y, x, nvrtc.i32(n)), shared_mem=n * 4)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x.flip(0))


STATIC_AND_DYNAMIC = r"""
extern "C" __global__ void reverse_with_static(float* out, const float* in, int n) {
    __shared__ float first[256];   // 1 KiB of static shared memory ...
    extern __shared__ float buf[];  // ... on top of exactly 48 KiB dynamic: past the limit without opting in
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = in[i];
    if (threadIdx.x < 256) first[threadIdx.x] = in[n - 1 - threadIdx.x];  // the first 256 outputs come from here
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = i < 256 ? first[i] : buf[n - 1 - i];
}
"""


@needs_gpu
def test_static_shared_memory_counts_toward_the_48_kib_launch_limit():
    _reverse_through_shared(STATIC_AND_DYNAMIC, "reverse_with_static", 48 * 1024 // 4)


@needs_gpu
def test_dynamic_shared_limit_leaves_room_for_the_static_arrays():
    kernel = nvrtc.compile_kernel(STATIC_AND_DYNAMIC, "reverse_with_static")
    device = torch.device("cuda", 0)
    free, limit = nvrtc.dynamic_shared_limit(kernel, device), nvrtc.shared_memory_limit(device)
    # its 256-float array; for sm_90 the cubin lists 2 KiB (cuobjdump -res-usage), 1 KiB of them reserved
    assert limit - 2048 <= free <= limit - 1024
    _reverse_through_shared(STATIC_AND_DYNAMIC, "reverse_with_static", free // 4)  # the whole of it launches


@needs_gpu
def test_shared_memory_beyond_the_device_limit_is_refused_with_the_limit():
    kernel = nvrtc.compile_kernel(BIG_SHARED, "reverse_through_shared")
    x = torch.zeros(4, device="cuda")
    too_much = torch.cuda.get_device_properties(0).shared_memory_per_block_optin + 1024
    with pytest.raises(nvrtc.LaunchError, match="allows"):
        nvrtc.launch(kernel, grid=(1,), block=(32,), args=(x, x, nvrtc.i32(4)), shared_mem=too_much)


# -- arch-specific targets (sm_90a: wgmma, setmaxnreg) ---------------------------------------------
def test_arch_specific_adds_the_a_suffix_once():
    assert nvrtc.arch_specific("sm_90") == "sm_90a"
    assert nvrtc.arch_specific("sm_90a") == "sm_90a"
    with pytest.raises(ValueError, match="arch"):
        nvrtc.arch_specific("compute_90")


@pytest.mark.parametrize(("module_arch", "device", "ok"), [
    ("sm_90", "sm_90", True),
    ("sm_90a", "sm_90", True),     # arch-specific code runs on exactly its arch
    ("sm_90a", "sm_100", False),   # ... and nowhere else (no forward compatibility for "a" targets)
    ("sm_90a", "sm_89", False),
    ("sm_80", "sm_90", False),     # a cubin is built for one arch: launch refuses the others, as before
    ("sm_100a", "sm_100", True),
    ("sm_90", "sm_90a", False),
])
def test_launch_accepts_the_devices_arch_or_its_arch_specific_variant_only(module_arch, device, ok):
    assert nvrtc.runs_on(module_arch, device) is ok


WGMMA_PROBE = r"""
extern "C" __global__ void probe(float* y) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    y[threadIdx.x] = 1.f;
#else
    y[threadIdx.x] = 0.f;
#endif
}
"""


@needs_nvcc
def test_compile_check_builds_sm90a_and_reports_ptxas_usage():
    result = nvrtc.compile_check(WGMMA_PROBE, "sm_90a", ptxas_verbose=True)
    assert result.kernels == ("probe",)
    assert "registers" in result.log and "spill" in result.log


@needs_nvrtc
def test_nvrtc_builds_sm90a_with_the_arch_specific_features(monkeypatch):
    monkeypatch.setenv(nvrtc.CACHE_ENV, "off")
    module = nvrtc.build(WGMMA_PROBE, arch="sm_90a", source_name="probe.cu")
    assert module.arch == "sm_90a" and nvrtc.elf_function_symbols(module.cubin) == ["probe"]
    assert nvrtc.build(WGMMA_PROBE, arch="sm_90", source_name="probe.cu").key != module.key
    nvrtc.clear_cache()


# -- TMA tensor maps (checks before the driver is reached) -----------------------------------------
@pytest.mark.parametrize(("make", "box", "swizzle", "match"), [
    (lambda: torch.zeros(4, 8, 8, dtype=torch.bfloat16), (8, 8), 128, "2-D"),
    (lambda: torch.zeros(8, 8, dtype=torch.float64), (8, 8), 128, "element type"),
    (lambda: torch.zeros(8, 16, dtype=torch.bfloat16).t(), (8, 8), 128, "unit-stride"),
    (lambda: torch.zeros(10, 9, dtype=torch.bfloat16), (8, 8), 128, "16-byte aligned"),  # 18-byte rows
    (lambda: torch.zeros(64, 128, dtype=torch.bfloat16), (64, 72), 128, "swizzle"),  # 144-byte box row
    (lambda: torch.zeros(64, 128, dtype=torch.bfloat16), (64, 64), 48, "swizzle"),
    (lambda: torch.zeros(512, 64, dtype=torch.bfloat16), (512, 64), 128, "1..256"),
    (lambda: torch.zeros(64, 64, dtype=torch.bfloat16), (64, 64), 128, "CUDA memory"),  # legal map, CPU tensor
])
def test_tensor_map_rules_are_checked_before_the_driver(make, box, swizzle, match):
    with pytest.raises(nvrtc.TensorMapError, match=match):
        nvrtc.tensor_map(make(), box, swizzle=swizzle)


@pytest.mark.parametrize("promotion", [32, 512, -1, 256.0, "256"])
def test_tensor_map_refuses_an_l2_promotion_the_driver_lacks(promotion):
    with pytest.raises(nvrtc.TensorMapError, match=f"l2_promotion={promotion} is not one of"):
        nvrtc.tensor_map(torch.zeros(64, 64, dtype=torch.bfloat16), (64, 64), l2_promotion=promotion)


@needs_gpu
def test_tensor_map_rules_and_cache_on_gpu():
    x = torch.zeros(100, 72, dtype=torch.bfloat16, device="cuda")
    first = nvrtc.tensor_map(x, (64, 64))
    assert first.dtype == torch.uint8 and first.numel() == 128 and first.data_ptr() % 64 == 0
    assert nvrtc.tensor_map(x, (64, 64)) is first  # cached: no encode, no copy
    assert nvrtc.tensor_map(x, (128, 64)) is not first
    assert nvrtc.tensor_map(x, (64, 64), l2_promotion=128) is not first  # the promotion is part of the map
    with pytest.raises(nvrtc.TensorMapError, match="16-byte"):
        nvrtc.tensor_map(torch.zeros(10, 9, dtype=torch.bfloat16, device="cuda"), (8, 8))  # 18-byte rows
    with pytest.raises(nvrtc.TensorMapError, match="swizzle"):
        nvrtc.tensor_map(x, (64, 72))  # a 144-byte box row does not fit the 128-byte swizzle


@needs_gpu
def test_tensor_map_on_another_stream_waits_for_its_copy_and_eviction_keeps_the_cache_bounded(monkeypatch):
    monkeypatch.setattr(nvrtc, "TENSOR_MAP_CACHE_SIZE", 2)
    monkeypatch.setattr(nvrtc, "_TENSOR_MAPS", {})
    xs = [torch.zeros(64, 64, dtype=torch.bfloat16, device="cuda") for _ in range(3)]
    first = nvrtc.tensor_map(xs[0], (64, 64))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert nvrtc.tensor_map(xs[0], (64, 64)) is first  # a hit from another stream: same bytes
    for x in xs[1:]:
        nvrtc.tensor_map(x, (64, 64))
    assert len(nvrtc._TENSOR_MAPS) == 2 and nvrtc.tensor_map(xs[0], (64, 64)) is not first  # evicted, re-encoded
    torch.cuda.synchronize()


@needs_gpu
def test_tensor_map_is_refused_during_graph_capture():
    x = torch.zeros(64, 64, dtype=torch.bfloat16, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(nvrtc.TensorMapError, match="graph capture"), torch.cuda.graph(graph):
        nvrtc.tensor_map(x, (64, 64))


def test_tensor_maps_unusable_names_missing_bindings(monkeypatch):
    monkeypatch.setattr(nvrtc, "_driver_bindings_missing", lambda: "cuda.bindings is not installed")
    assert nvrtc.tensor_maps_unusable() == "cuda.bindings is not installed"
    monkeypatch.setattr(nvrtc, "_driver_bindings_missing", lambda: None)
    assert nvrtc.tensor_maps_unusable() is None  # no GPU here: nothing can be capturing


def test_wgmma_arch_only_on_sm90(monkeypatch):
    assert nvrtc.wgmma_arch(torch.device("cpu")) is None
    for arch, expected in (("sm_90", "sm_90a"), ("sm_89", None), ("sm_80", None), ("sm_100", None)):
        monkeypatch.setattr(nvrtc, "device_arch", lambda index=None, a=arch: a)
        assert nvrtc.wgmma_arch(torch.device("cuda", 0)) == expected
