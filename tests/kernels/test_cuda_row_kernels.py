"""The CUDA row kernels' paths the spec sets reach only at one CONFIG: softmax rows wider than its registers (kept in
shared memory or read twice), rows between vector boundaries, misaligned bases and threads that see only -inf,
cross entropy's loads in flight (UNROLL), misaligned rows and its one-block mean, reduce's UNROLL, both with and
without evict-first loads; the norms' weights loaded with x. On the GPU (AUTOKERNEL_TEST_DEVICE=cuda machines); the
CPU runs compile them (test_cuda_starters).
"""

from __future__ import annotations

import pytest
import torch
from test_cuda_starters import _import

from autokernel_ci import kernelfile
from autokernel_ci.compare import compare
from autokernel_ci.paths import starter_kernel
from autokernel_ci.specs import get_spec

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _module(kernel_type: str, config: dict):
    kf = kernelfile.load(starter_kernel(kernel_type, "cuda"))
    return _import(kernel_type, kf.with_config({**kf.config, **config}).source)


def _check(kernel_type: str, out, inputs, dtype) -> None:
    spec = get_spec(kernel_type)
    failure = compare(out, spec.run_reference(inputs), spec.tolerances[dtype],
                      expect_dtype=spec.output_dtype or inputs[0].dtype)
    assert failure is None, f"{kernel_type} {dtype}: {failure}"


def _gen() -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(3)


# CACHE_VECS 1 x 128 threads holds 1024 bf16 (512 fp32) of a row: n = 5000 streams the rest through the fold and
# keeps it in shared memory (ROW_SMEM_KB; 0: read twice; 48 KiB holds only part of a 50257-wide row's rest). Odd n:
# rows start between vector boundaries (scalar head and tail around the vectors). 8192 / 8200 bf16: the widest row
# the register cache holds at the default, and one vector more (it streams).
@pytest.mark.parametrize("config", [{}, {"CACHE_VECS": 1, "THREADS": 128}, {"SMALL_N": 0}, {"VEC_BYTES": 4},
                                    {"ROW_SMEM_KB": 0}, {"ROW_SMEM_KB": 48, "UNROLL": 1}, {"THREADS": 512}])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [5000, 8192, 8200, 1000, 50257, 1031])
def test_softmax_rows_beyond_the_registers_and_masked_halves(config, dtype, n):
    x = torch.randn((6, n), device="cuda", generator=_gen(), dtype=torch.float32) * 3
    x[1, : n // 2] = float("-inf")  # the first threads see only -inf: their share must be exact zeros
    x[2, n // 2:] = float("-inf")
    x[3, 1:] = float("-inf")  # one finite entry: output exactly 1 there
    x[4] *= 600  # logits ~2000
    x = x.to(dtype)
    y = _module("softmax", config).kernel_fn(x)
    torch.cuda.synchronize()
    _check("softmax", y, (x,), dtype)
    assert y[1, : n // 2].eq(0).all() and y[3, 0].item() == 1.0


@pytest.mark.parametrize("config", [{}, {"ROW_SMEM_KB": 0}])
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_misaligned_bases_take_the_scalar_kernel(config, dtype):
    # x starts one element past a 16-byte boundary: no vector of it is aligned, the launcher picks the scalar kernel
    # (its shared-memory keep counts 1-element vectors)
    flat = (torch.randn(7 * 20001 + 1, device="cuda", generator=_gen()) * 4).to(dtype)
    x = flat[1:].view(7, 20001)
    x[2, 5:] = float("-inf")
    y = _module("softmax", config).kernel_fn(x)
    torch.cuda.synchronize()
    _check("softmax", y, (x,), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_all_masked_row_is_nan_like_torch(dtype):
    x = torch.randn((3, 3000), device="cuda", generator=_gen()).to(dtype)
    x[1] = float("-inf")
    y = _module("softmax", {"CACHE_VECS": 1}).kernel_fn(x)
    torch.cuda.synchronize()
    assert torch.equal(y.isnan(), torch.softmax(x, -1).isnan()) and y[1].isnan().all()


@pytest.mark.parametrize("config", [{}, {"UNROLL": 1, "THREADS": 128}, {"UNROLL": 8, "THREADS": 1024},
                                    {"VEC_BYTES": 8, "UNROLL": 2}, {"EVICT_FIRST": False}])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("v", [32000, 50257, 129])
def test_cross_entropy_loads_in_flight_and_misaligned_rows(config, dtype, v):
    # v = 50257: every row starts at a different 16-byte offset (scalar head, vectors, scalar tail)
    logits = (torch.randn((37, v), device="cuda", generator=_gen()) * 4).to(dtype)
    logits[5, : v // 2] = float("-inf")  # masked vocabulary entries add nothing
    targets = torch.randint(0, v, (37,), device="cuda", generator=_gen())
    targets[5] = v - 1
    targets[::7] = -100
    out = _module("cross_entropy", config).kernel_fn(logits, targets)
    torch.cuda.synchronize()
    _check("cross_entropy", out, (logits, targets), dtype)


def test_cross_entropy_degenerate_batches_give_torch_s_nan():
    module = _module("cross_entropy", {})
    logits = torch.randn((4, 100), device="cuda", generator=_gen())
    ignored = torch.full((4,), -100, device="cuda")
    assert module.kernel_fn(logits, ignored).isnan().item()  # torch: 0 / 0
    assert module.kernel_fn(logits[:0], ignored[:0]).isnan().item()
    bad = torch.tensor([1, 2, 100, 3], device="cuda")  # a target past V has no logit
    assert module.kernel_fn(logits, bad).isnan().item()


@pytest.mark.parametrize("config", [{}, {"UNROLL": 1}, {"UNROLL": 8, "THREADS": 128}, {"SMALL_N": 0, "UNROLL": 4},
                                    {"EVICT_FIRST": False, "VEC_BYTES": 8}])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [8192, 3001, 65537])
def test_reduce_unrolled_loads(config, dtype, n):
    x = torch.randn((9, n), device="cuda", generator=_gen()).to(dtype)
    y = _module("reduce", config).kernel_fn(x)
    torch.cuda.synchronize()
    _check("reduce", y, (x,), dtype)
    assert torch.equal(y, _module("reduce", config).kernel_fn(x)), "the fixed summation order gives the same bits"


# Weights loaded with x and kept packed: rows past the cache (n = 5000 at 128 x 2 x 8 cached), a capped register
# file (MIN_BLOCKS 4 spills at CACHE_VECS 4), the one-warp rows (SMALL_N) and the evict-first loads / stores (cached
# vectors .cs, the tail plain) and the weights loaded after the reductions must all give the reference.
@pytest.mark.parametrize("kernel_type", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("config", [{}, {"THREADS": 128, "CACHE_VECS": 2}, {"THREADS": 256, "CACHE_VECS": 4,
                                                                             "MIN_BLOCKS": 4}, {"SMALL_N": 8192},
                                    {"THREADS": 128, "CACHE_VECS": 2, "EVICT_FIRST": True, "STREAM_STORE": True},
                                    {"THREADS": 128, "CACHE_VECS": 2, "WEIGHTS_LATE": True}])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [4096, 5000, 768])
def test_norms_weights_in_flight(kernel_type, config, dtype, n):
    spec = get_spec(kernel_type)
    inputs = spec.make_inputs({"M": 11, "N": n}, dtype, torch.device("cuda"), _gen())
    out = _module(kernel_type, config).kernel_fn(*inputs)
    torch.cuda.synchronize()
    _check(kernel_type, out, inputs, dtype)
