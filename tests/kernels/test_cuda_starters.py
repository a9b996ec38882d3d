"""The nine CUDA starter kernels: contract, imports, and every CUDA build compiled with nvcc for sm_90.

Without a GPU the kernels cannot run here; the nvcc builds prove each source (every dtype
instantiation, every kernel name kernel_fn may ask for) compiles for the H100/H200 arch. On a
machine with CUDA the last test also runs each starter on the cpu and edge shape sets.
"""

from __future__ import annotations

import ast
import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from autokernel_ci import kernelfile, nvrtc
from autokernel_ci.compare import compare
from autokernel_ci.paths import starter_kernel
from autokernel_ci.specs import KERNEL_TYPES, get_spec

ALLOWED_IMPORTS = {"torch", "math", "autokernel_ci.nvrtc", "autokernel_ci"}
ARCH = "sm_90"  # H100 / H200
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")


def _nvrtc_loads() -> bool:
    try:
        nvrtc._nvrtc_compile('extern "C" __global__ void k() {}', [], ARCH, "probe.cu")
        return True
    except Exception:  # noqa: BLE001 - no libnvrtc on this machine
        return False


needs_nvrtc = pytest.mark.skipif(not _nvrtc_loads(), reason="libnvrtc not loadable (pip install nvidia-cuda-nvrtc)")


def _import(kernel_type: str, source: str | None = None) -> ModuleType:
    """Import our own (trusted) starter file, optionally with its CONFIG replaced, as a module."""
    path = starter_kernel(kernel_type, "cuda")
    name = f"_cuda_starter_{kernel_type}_{abs(hash(source)) if source else 0}"
    if source is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = ModuleType(name)
        module.__file__ = str(path)
        exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - our own starter file
    sys.modules.setdefault(name, module)
    return module


@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_starter_meets_the_kernel_file_contract(kernel_type):
    kf = kernelfile.load(starter_kernel(kernel_type, "cuda"))
    assert kf.kernel_type == kernel_type
    assert kf.backend == "cuda"
    assert kf.summary, "the docstring's first line is the kernel's one-line summary"
    for key, options in kf.search_space.items():
        assert kf.config[key] in options, f"CONFIG[{key!r}]={kf.config[key]} is outside SEARCH_SPACE {options}"


@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_starter_imports_only_torch_math_and_nvrtc(kernel_type):
    tree = ast.parse(starter_kernel(kernel_type, "cuda").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported |= {f"{node.module}.{a.name}" for a in node.names}
    assert imported <= ALLOWED_IMPORTS, f"unexpected imports {imported - ALLOWED_IMPORTS}"
    assert "autokernel_ci.nvrtc" in imported


PRELUDE_DEFINITIONS = ("float to_float(", "T from_float(", "struct alignas(sizeof(T) * N) Vec", "float warp_sum(",
                       "float group_sum(", "#define INFINITY", "unsigned smem_addr(", "void cp_async16(",
                       "void cp_async_commit(", "void ldsm_x4(", "void ldsm_x4_trans(", "void mma16816",
                       "float fast_exp2(", "void online_merge(", "void online_fold(", "void scan_row(",
                       "struct OnlineLse", "V load_vec(", "void store_vec(", "int vec_head(")


@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_starter_uses_the_shared_prelude_instead_of_a_copy(kernel_type):
    """One copy of the device helpers (nvrtc.PRELUDE), named in the file: `nvrtc.PRELUDE + r\"\"\"...`."""
    text = starter_kernel(kernel_type, "cuda").read_text()
    assert 'CUDA_SOURCE = nvrtc.PRELUDE + r"""' in text
    module = _import(kernel_type)
    for source, *_ in module.cuda_builds():
        assert source.startswith(nvrtc.PRELUDE)
        own = source[len(nvrtc.PRELUDE):]
        copied = [d for d in PRELUDE_DEFINITIONS if d in own]
        assert not copied, f"{kernel_type} repeats prelude definitions {copied}"


def _builds(kernel_type: str, module: ModuleType) -> list[tuple[str, dict, list[str], str]]:
    """(source, defines, names, arch): a build without its own arch (an arch-specific one, e.g. matmul's sm_90a
    wgmma build, names it as a fourth item) is compiled for ARCH."""
    builds = module.cuda_builds()
    assert builds, "cuda_builds() lists at least one build"
    out = []
    for build in builds:
        assert len(build) in (3, 4), "cuda_builds() items are (source, defines, names[, arch])"
        out.append((*build[:3], build[3] if len(build) == 4 else ARCH))
    return out


PRE_HOPPER_ARCH = "sm_80"  # A100; L4 / RTX 4090 (sm_89) lack the same Hopper features


@needs_nvcc
@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_the_device_arch_builds_compile_before_hopper(kernel_type):
    """The builds without an arch of their own are what an A100, L4 or RTX 4090 compiles: nothing Hopper-only
    (wgmma, TMA, __cluster_dims__) may leak into them, at CONFIG and at the search space's last values (the matmul's
    WG_CLUSTER 2 default once did: "__cluster_dims__ is not supported for this GPU architecture")."""
    kf = kernelfile.load(starter_kernel(kernel_type, "cuda"))
    corner = {key: options[-1] for key, options in kf.search_space.items()}
    for module in (_import(kernel_type), _import(kernel_type, kf.with_config(corner).source)):
        for source, defines, names, *own_arch in module.cuda_builds():
            if not own_arch:
                result = nvrtc.compile_check(source, PRE_HOPPER_ARCH, defines=defines, source_name=f"{kernel_type}.cu")
                assert set(names) <= set(result.kernels), f"{kernel_type}: {sorted(result.kernels)}"


@needs_nvrtc
@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_every_build_compiles_through_nvrtc_with_every_kernel_name(kernel_type):
    """NVRTC is what builds a candidate at run time, and it is not nvcc (no <math.h>, so no INFINITY): every build
    compiles through it for its arch with every kernel it names and one instantiation per dtype of the spec. (An nvcc
    compile of the same builds was a second test; it added ~63 s of CI's CPU time and no case NVRTC's did not cover.)"""
    module = _import(kernel_type)
    for source, defines, names, arch in _builds(kernel_type, module):
        cubin = nvrtc._nvrtc_compile(source, nvrtc.option_strings(defines), arch, f"{kernel_type}.cu")
        kernels = set(nvrtc.elf_function_symbols(cubin))
        missing = set(names) - kernels
        assert not missing, f"{kernel_type} {defines}: kernels {sorted(missing)} not in the cubin {sorted(kernels)}"
        for dtype in ("f32", "f16", "bf16"):  # a name token, not a substring: "f16" is inside every "bf16"
            assert any(dtype in k.split("_") for k in kernels), f"{kernel_type}: no {dtype} kernel in {sorted(kernels)}"


@needs_nvcc
@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_largest_search_space_point_still_compiles(kernel_type):
    """The search agent may pick the last value of every SEARCH_SPACE list: that corner must build too."""
    kf = kernelfile.load(starter_kernel(kernel_type, "cuda"))
    corner = {key: options[-1] for key, options in kf.search_space.items()}
    module = _import(kernel_type, kf.with_config(corner).source)
    source, defines, names, arch = _builds(kernel_type, module)[-1]  # flash_attention: the largest head dim
    result = nvrtc.compile_check(source, arch, defines=defines, source_name=f"{kernel_type}.cu")
    assert set(names) <= set(result.kernels)


# Each cache-policy knob alone: EVICT_FIRST marks x's 16-byte loads .cs, STREAM_STORE y's 16-byte stores. Plain
# 16-byte loads must remain: rotary's cos / sin (every row of a position reads them); the norms' weights and the
# re-reads of a row's tail past the register cache.
_POLICY_POINTS = [(t, {"EVICT_FIRST": ef, "STREAM_STORE": ss}) for t in ("layernorm", "rmsnorm")
                  for ef in (False, True) for ss in (False, True)]
_POLICY_POINTS += [("rotary_embedding", {"EVICT_FIRST": ef}) for ef in (False, True)]


@needs_nvcc
@pytest.mark.parametrize(("kernel_type", "config"), _POLICY_POINTS)
def test_cache_policy_knobs_reach_the_ptx(kernel_type, config, tmp_path):
    kf = kernelfile.load(starter_kernel(kernel_type, "cuda"))
    module = _import(kernel_type, kf.with_config({**kf.config, **config}).source)
    source, defines, _names, arch = _builds(kernel_type, module)[0]
    nvrtc.compile_check(source, arch, defines=defines, source_name=f"{kernel_type}.cu", keep_ptx=tmp_path / "k.ptx")
    ptx = (tmp_path / "k.ptx").read_text()
    assert ("ld.global.cs.v4" in ptx) == config["EVICT_FIRST"]
    assert ("st.global.cs.v4" in ptx) == config.get("STREAM_STORE", False)
    assert "ld.global.nc.v4" in ptx or "ld.global.v4" in ptx, "the shared inputs' loads keep the default policy"


def _shapes(spec):
    return spec.shapes("cpu", "edge")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_starter_matches_reference_on_gpu(kernel_type):
    spec = get_spec(kernel_type)
    module = _import(kernel_type)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for shape in _shapes(spec):
        for dtype in spec.dtypes:
            inputs = spec.make_inputs(shape, dtype, torch.device("cuda"), gen)
            out = module.kernel_fn(*inputs)
            torch.cuda.synchronize()
            failure = compare(out, spec.run_reference(inputs), spec.tolerances[dtype],
                              expect_dtype=spec.output_dtype or inputs[0].dtype)
            assert failure is None, f"{kernel_type} {spec.describe_shape(shape)} {dtype}: {failure}"


def _stress_cases() -> list:
    return [pytest.param(t, case.name, dtype, id=f"{t}-{case.name}-{str(dtype)[6:]}")
            for t in KERNEL_TYPES for case in get_spec(t).stress_cases for dtype in get_spec(t).dtypes]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(("kernel_type", "case_name", "dtype"), _stress_cases())
def test_starter_survives_the_stress_cases_on_gpu(kernel_type: str, case_name: str, dtype: torch.dtype) -> None:
    """Stage 3's inputs (scores ~25, outputs ~3e4, ...) on the cpu and odd shapes: plain TF32 fails them in fp32
    (the harness's verification on the H200 caught the CUDA flash attention's fp32 path so)."""
    spec = get_spec(kernel_type)
    case = next(c for c in spec.stress_cases if c.name == case_name)
    module = _import(kernel_type)
    for shape in spec.shapes("cpu", "odd"):
        gen = torch.Generator(device="cuda").manual_seed(7)
        inputs = case.make_inputs(shape, dtype, torch.device("cuda"), gen)
        out = module.kernel_fn(*inputs)
        torch.cuda.synchronize()
        failure = compare(out, spec.run_reference(inputs), spec.tolerance(dtype, case_name),
                          expect_dtype=spec.output_dtype or inputs[0].dtype)
        assert failure is None, f"{kernel_type} {case_name} {spec.describe_shape(shape)} {dtype}: {failure}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("persistent", [1, 2])
@pytest.mark.parametrize(("rows", "n"), [(301, 2100), (4001, 100), (5, 2100)])  # wide, narrow (8-row groups), few
def test_reduce_persistent_blocks_walk_every_row_on_gpu(persistent: int, rows: int, n: int) -> None:
    """PERSISTENT k launches at most k blocks an SM (the _wp / _np kernels): 301 wide rows and 4001 narrow ones
    (501 groups) outnumber 2 x 132 blocks, so blocks walk several groups and the last group is partial."""
    kf = kernelfile.load(starter_kernel("reduce", "cuda"))
    module = _import("reduce", kf.with_config({**kf.config, "PERSISTENT": persistent}).source)
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(rows, n, device="cuda", generator=gen).to(torch.bfloat16)
    spec = get_spec("reduce")
    failure = compare(module.kernel_fn(x), spec.run_reference((x,)), spec.tolerances[torch.bfloat16],
                      expect_dtype=torch.bfloat16)
    assert failure is None, f"PERSISTENT {persistent} {rows}x{n}: {failure}"


def test_starter_files_exist_for_every_type():
    missing = [t for t in KERNEL_TYPES if not Path(starter_kernel(t, "cuda")).is_file()]
    assert not missing


def _strided_layouts(kernel_type: str, inputs: tuple) -> list[tuple[str, tuple]]:
    """Layouts models hand these kernels beyond the spec's contiguous inputs (read in place or copied)."""
    if kernel_type == "matmul":
        a, b = inputs
        return [("b = weight.T", (a, b.T.contiguous().T)), ("a row slice", (torch.cat([a, a], 1)[:, : a.shape[1]], b))]
    q, k, v, causal, scale = inputs
    def from_bshd(t):  # a [B,S,H,D] projection viewed as [B,H,S,D]
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    return [("q/k/v from [B,S,H,D]", (from_bshd(q), from_bshd(k), from_bshd(v), causal, scale))]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kernel_type", ["matmul", "flash_attention"])
@pytest.mark.parametrize("set_name", ["cpu", "edge", "odd"])
def test_strided_layouts_on_gpu(kernel_type, set_name):
    spec = get_spec(kernel_type)
    module = _import(kernel_type)
    gen = torch.Generator(device="cuda").manual_seed(1)
    for shape in spec.shapes(set_name):
        for dtype in spec.dtypes:
            for label, inputs in _strided_layouts(kernel_type, spec.make_inputs(shape, dtype, torch.device("cuda"),
                                                                                  gen)):
                out = module.kernel_fn(*inputs)
                torch.cuda.synchronize()
                failure = compare(out, spec.run_reference(inputs), spec.tolerances[dtype],
                                  expect_dtype=spec.output_dtype or inputs[0].dtype)
                assert failure is None, f"{kernel_type} {label} {spec.describe_shape(shape)} {dtype}: {failure}"


# At the default (256 threads x 4 vectors of 16 bytes a thread, SMALL_N 1024): a bf16 row of 8192 fills the register
# cache exactly and takes the kernel without the streaming loop; one more vector (8200) or fp32's 8192 (2048 vectors)
# need it. Rows of one warp hold 4 x 32 vectors: bf16 1000 fits, fp32 1000 (250) does not; a base off the vector
# boundary counts single elements (scalar kernel: 1,024 a block). The kernel without the loop traps on a row it
# cannot hold (the GPU tests' 8192 / 8200 rows, tests/kernels/test_cuda_row_kernels.py).
@pytest.mark.parametrize(("dtype", "n", "vec", "name"), [
    (torch.bfloat16, 8192, 8, "softmax_bf16_v_w"),
    (torch.bfloat16, 8200, 8, "softmax_bf16_r_v_w"),
    (torch.float32, 8192, 4, "softmax_f32_r_v_w"),
    (torch.float16, 50257, 8, "softmax_f16_r_v_w"),
    (torch.bfloat16, 1000, 8, "softmax_bf16_v_n"),
    (torch.float32, 1000, 4, "softmax_f32_r_v_n"),
    (torch.float32, 100, 4, "softmax_f32_v_n"),
    (torch.float16, 1024, 1, "softmax_f16_r_s_n"),
    (torch.float16, 2000, 1, "softmax_f16_r_s_w"),
    (torch.float16, 1025, 8, "softmax_f16_v_w"),
])
def test_softmax_takes_the_streaming_kernel_only_past_the_register_cache(dtype, n, vec, name):
    module = _import("softmax")
    assert module.CONFIG["THREADS"] == 256 and module.CONFIG["CACHE_VECS"] == 4 and module.CONFIG["SMALL_N"] == 1024
    assert module._kernel_name(dtype, n, vec) == name
    assert name in module.cuda_builds()[0][2]
