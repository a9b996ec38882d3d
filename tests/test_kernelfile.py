"""The kernel-file contract is read statically: nothing in the file runs."""

import textwrap

import pytest

from autokernel_ci import kernelfile
from autokernel_ci.kernelfile import KernelFileError
from autokernel_ci.paths import starter_kernel
from autokernel_ci.specs import KERNEL_TYPES

GOOD = textwrap.dedent('''\
    """RMSNorm, test file."""
    KERNEL_TYPE = "rmsnorm"
    BACKEND = "triton"
    CONFIG = {"BLOCK": 1024, "num_warps": 4}  # tuned
    SEARCH_SPACE = {"BLOCK": [512, 1024], "num_warps": [4, 8]}
    raise SystemExit("a parse must never execute the file")
    def kernel_fn(x, weight, eps):
        return x
''')


def test_parse_reads_declarations_without_executing():
    kf = kernelfile.parse(GOOD)
    assert (kf.kernel_type, kf.backend, kf.config) == ("rmsnorm", "triton", {"BLOCK": 1024, "num_warps": 4})
    assert kf.summary == "RMSNorm, test file."
    assert len(kf.source_hash) == 16


def test_config_points_cover_the_cross_product():
    points = list(kernelfile.parse(GOOD).config_points())
    assert len(points) == 4 and {"BLOCK": 512, "num_warps": 8} in points


def test_with_config_rewrites_only_config():
    kf = kernelfile.parse(GOOD).with_config({"BLOCK": 512, "num_warps": 8})
    assert kf.config == {"BLOCK": 512, "num_warps": 8}
    assert kf.source.count("\n") == GOOD.count("\n")
    assert "# tuned" in kf.source and "SEARCH_SPACE = " in kf.source
    assert kf.source_hash != kernelfile.parse(GOOD).source_hash


def test_multiline_config_is_replaced_whole():
    src = GOOD.replace('CONFIG = {"BLOCK": 1024, "num_warps": 4}  # tuned',
                       'CONFIG = {\n    "BLOCK": 1024,\n    "num_warps": 4,\n}')
    kf = kernelfile.parse(src).with_config({"BLOCK": 512, "num_warps": 4})
    assert kf.config["BLOCK"] == 512 and '"BLOCK": 1024' not in kf.source


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.replace('KERNEL_TYPE = "rmsnorm"\n', ""), "missing top-level KERNEL_TYPE"),
        (lambda s: s.replace('"rmsnorm"', '"conv"'), "KERNEL_TYPE='conv' is not one of"),
        (lambda s: s.replace('"triton"', '"opencl"'), "BACKEND='opencl'"),
        (lambda s: s.replace("def kernel_fn(x, weight, eps)", "def kernel_fn(x, eps)"), "does not match"),
        (lambda s: s.replace("def kernel_fn", "def other_fn"), "no top-level `def kernel_fn"),
        (lambda s: s.replace('"num_warps": [4, 8]', '"stages": [2]'), "CONFIG does not set"),
        (lambda s: s.replace('[512, 1024]', '[]'), "non-empty list"),
        (lambda s: s.replace('CONFIG = {"BLOCK": 1024', 'CONFIG = {"BLOCK": 2 ** 10'), "must be a literal"),
        (lambda s: s + "def broken(:\n", "syntax error at line"),
    ],
)
def test_contract_violations_are_named(edit, message):
    with pytest.raises(KernelFileError, match=message):
        kernelfile.parse(edit(GOOD))


def test_load_missing_file(tmp_path):
    with pytest.raises(KernelFileError, match="does not exist"):
        kernelfile.load(tmp_path / "nope.py")


@pytest.mark.parametrize(("source", "names"), [
    ('extern "C" __global__ void rms(float* y) {}', ["rms"]),
    ("__global__ __launch_bounds__(256) void before (float* y) {}", ["before"]),
    ('extern "C" __global__ void __launch_bounds__(fa::THREADS, 1) after_##SUFFIX(T* y) {}', ["after_"]),
    ("__global__ void __launch_bounds__(128)\n    pasted_ ## NAME (T* y) {}", ["pasted_"]),
    ("__global__ void __launch_bounds__(128) twice_##NAME##p(T* y) {}", ["twice_"]),  # two pastes
    ("__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1) clustered(float* y) {}", ["clustered"]),
    ("__global__ __cluster_dims__(2, 1, 1) void __launch_bounds__(384) clustered_before(float* y) {}",
     ["clustered_before"]),
    ("__device__ void helper(float x) {}", []),
])
def test_cuda_kernel_names_see_attributes_around_void_and_pasted_names(source: str, names: list[str]) -> None:
    assert kernelfile.cuda_kernel_names(source) == names


@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_every_cuda_starter_kernel_is_named_where_the_harness_looks_for_it(kernel_type: str) -> None:
    """The smoke stage's kernel_ran check looks for these names in the profiler's kernel events (own_kernel_event):
    every kernel a CUDA starter can launch must contain one of them, and no attribute is a name."""
    import importlib.util

    path = starter_kernel(kernel_type, "cuda")
    spec = importlib.util.spec_from_file_location(f"_names_{kernel_type}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = kernelfile.cuda_kernel_names(path.read_text())
    assert found and not {"__launch_bounds__", "__cluster_dims__", "WG_CLUSTER_DIMS"} & set(found)
    for build in module.cuda_builds():
        for name in build[2]:
            assert kernelfile.own_kernel_event(name, found), f"{kernel_type}: kernel {name} not matched by {found}"


@pytest.mark.parametrize(("event", "expected"), [
    ("reduce_bf16_n", True),  # extern "C" CUDA kernel
    ("_sum_multirow", True),  # Triton kernel
    ("void my_ns::reduce_tile<128>(float*, int)", True),  # a candidate's own templated kernel
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<bool> >(at::native::ReduceOp<bool>)", False),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int)", False),
    ("void (anonymous namespace)::reduce_softmax<float>(float*)", False),
    ("void at_cuda_detail::cub::DeviceReduceKernel<reduce_>(int)", False),
    ("ampere_bf16_s16816gemm_bf16_128x128", False),  # cuBLAS: shares no name
    ("void splitKreduce_kernel<32, 16, int, float>(cublasSplitKParams<float>)", False),  # fragment mid-identifier
])
def test_own_kernel_event_counts_only_the_files_own_kernels(event, expected):
    """A macro-pasted name ('reduce_') must not match PyTorch's or cuBLAS's kernels (the harness's kernel_ran and the
    end-to-end engagement check both ask this)."""
    assert kernelfile.own_kernel_event(event, ("reduce_", "_sum_multirow", "reduce_tile")) is expected


def test_own_kernel_names_unwraps_autotuned_and_heuristics_kernels(tmp_path):
    """The harness's own copy of this walk kept only bare JITFunctions: an @triton.autotune kernel had no name, so
    kernel_ran would have rejected an honest autotuned candidate."""
    import importlib.util

    path = tmp_path / "autotuned.py"
    path.write_text(textwrap.dedent('''\
        import triton
        import triton.language as tl

        @triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])
        @triton.jit
        def _tuned(x_ptr, n, BLOCK: tl.constexpr):
            pass

        @triton.heuristics({"BLOCK": lambda args: 64})
        @triton.jit
        def _guessed(x_ptr, n, BLOCK: tl.constexpr):
            pass

        @triton.jit
        def _plain(x_ptr):
            pass

        CONFIG = triton.Config({"BLOCK": 32})  # a triton object that is no kernel
    '''))
    spec = importlib.util.spec_from_file_location("_autotuned_names", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source = 'extern "C" __global__ void __launch_bounds__(256) extra_kernel(float* y) {}'
    assert kernelfile.own_kernel_names(module, source) == ("_tuned", "_guessed", "_plain", "extra_kernel")


SCOPED = GOOD.replace('SEARCH_SPACE = {"BLOCK": [512, 1024], "num_warps": [4, 8]}',
                      'SEARCH_SPACE = {"BLOCK": [512, 1024], "num_warps": [4, 8]}\n'
                      'KNOB_SCOPE = {"num_warps": {"BLOCK": [1024]}}')


def test_knob_scope_makes_inactive_knobs_canonical():
    kf = kernelfile.parse(SCOPED)
    assert kf.knob_scope == {"num_warps": {"BLOCK": [1024]}}
    assert kf.canonical({"BLOCK": 512, "num_warps": 8}) == {"BLOCK": 512, "num_warps": 4}  # no effect at 512
    assert kf.canonical({"BLOCK": 1024, "num_warps": 8}) == {"BLOCK": 1024, "num_warps": 8}
    distinct = {tuple(sorted(kf.canonical(p).items())) for p in kf.config_points()}
    assert len(distinct) == 3  # 512 once, 1024 with either num_warps
    assert kernelfile.parse(GOOD).knob_scope == {}  # optional


def test_a_dtype_scoped_knob_keeps_the_files_value_at_other_dtypes():
    kf = kernelfile.parse(SCOPED.replace('KNOB_SCOPE = {"num_warps": {"BLOCK": [1024]}}',
                                         'KNOB_SCOPE = {"num_warps": {"dtype": ["fp32"], "BLOCK": [1024]}}'))
    moved = {"BLOCK": 1024, "num_warps": 8}
    assert kf.canonical(moved, "bf16") == {"BLOCK": 1024, "num_warps": 4}  # the file's 4, idle at bf16
    assert kf.canonical(moved, "fp32") == moved
    assert kf.canonical(moved) == moved  # no dtype given: only the knob conditions count
    assert kf.canonical({"BLOCK": 512, "num_warps": 8}, "fp32") == {"BLOCK": 512, "num_warps": 4}
    eight = kf.with_config({"BLOCK": 1024, "num_warps": 8})
    assert eight.canonical({"BLOCK": 1024, "num_warps": 4}, "bf16")["num_warps"] == 8  # that file's own value


@pytest.mark.parametrize(("scope", "message"), [
    ('{"num_warps": {"dtype": ["fp64"]}}', r"\['dtype'\] = \['fp64'\] must be a non-empty list of dtypes"),
    ('{"num_warps": {"dtype": "fp32"}}', "must be a non-empty list of dtypes from"),
    ('["num_warps"]', "KNOB_SCOPE must be a dict"),
    ('{"stages": {"BLOCK": [1024]}}', "names 'stages', which SEARCH_SPACE does not"),
    ('{"num_warps": {}}', "must be a non-empty dict"),
    ('{"num_warps": {"num_warps": [4]}}', "which is not another SEARCH_SPACE knob"),
    ('{"num_warps": {"BLOCK": [2048]}}', r"must be a non-empty list of SEARCH_SPACE\['BLOCK'\] values"),
])
def test_knob_scope_mistakes_are_named(scope: str, message: str):
    source = SCOPED.replace('KNOB_SCOPE = {"num_warps": {"BLOCK": [1024]}}', f"KNOB_SCOPE = {scope}")
    with pytest.raises(KernelFileError, match=message):
        kernelfile.parse(source)


@pytest.mark.parametrize(("kernel_type", "backend"), [("flash_attention", "triton"), ("flash_attention", "cuda"),
                                                      ("matmul", "cuda")])
def test_starters_scope_their_variant_knobs(kernel_type: str, backend: str):
    """The starters with variant-only knobs declare them, and the starter's own CONFIG is canonical."""
    kf = kernelfile.load(starter_kernel(kernel_type, backend))
    assert kf.knob_scope, f"{kernel_type}/{backend} declares no KNOB_SCOPE"
    assert kf.canonical(kf.config) == kf.config
