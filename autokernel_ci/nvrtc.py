"""CUDA C++ kernels built at run time through NVRTC (cuda.core) and launched on torch tensors.

Why NVRTC and not torch's `cpp_extension.load_inline`: on the H200 (DESIGN.md §5) load_inline took
60.8 s to build a one-line kernel, NVRTC 0.046 s. A loop that rebuilds a candidate every
experiment can only afford the second.

    kernel = compile_kernel(SOURCE, "rmsnorm_bf16", defines={"THREADS": 256})
    launch(kernel, grid=(rows,), block=(256,), args=(y, x, w, i32(n), f32(eps)))

Kernels are `extern "C" __global__` functions (no name mangling). Arguments: torch tensors are
passed as device pointers; scalars must say their C type through `i32`, `i64`, `u32`, `f32` or `f64`
(a bare Python int would silently become a 64-bit pointer, so it is refused). Launches go on
torch's current CUDA stream, so they order with the surrounding torch work. `PRELUDE` holds the
device helpers the starters share (fp16/bf16 conversions, `Vec`, warp and block sums); a source
includes it by starting with it: `CUDA_SOURCE = nvrtc.PRELUDE + r"..."` (see PRELUDE).

Builds are cached by sha256(source, options, arch, toolchain) in-process and, unless
AUTOKERNEL_CUBIN_CACHE=off, as cubins under ~/.cache/autokernel-ci/cubin (or the directory that
variable names). `compile_check` compiles the same source with nvcc, for machines without a GPU.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import io
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

DEFAULT_STD = "c++17"
CACHE_ENV = "AUTOKERNEL_CUBIN_CACHE"  # a directory, or "off" to keep the cache in memory only
NVCC_TIMEOUT_S = 300  # one nvcc build of our largest starter takes ~10 s on 2 cores
_ERROR_LINE = re.compile(r"\((\d+)\): (?:catastrophic )?error")

Defines = Mapping[str, Any] | None

# -- shared device code ----------------------------------------------------------------------------
PRELUDE = r"""// ---- autokernel_ci.nvrtc.PRELUDE: shared helpers (the kernel's own text follows) ----
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef INFINITY  // NVRTC has no <math.h>
#define INFINITY __int_as_float(0x7f800000)
#endif

// Storage type <-> fp32 (float, __half, __nv_bfloat16); from_float rounds to nearest even.
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// N elements loaded or stored as one aligned access (N * sizeof(T) bytes: 4, 8 or 16).
template <typename T, int N> struct alignas(sizeof(T) * N) Vec { T v[N]; };

// Sum over the 32 lanes of a warp; every lane gets the result.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the WPR warps that share a row; every thread of the group gets the same value.
template <int WPR>
__device__ __forceinline__ float group_sum(float v, float* red) {
    v = warp_sum(v);
    if (WPR == 1) return v;
    const int warp = threadIdx.x >> 5;
    __syncthreads();  // red[] may still be read by the previous reduction
    if ((threadIdx.x & 31) == 0) red[warp] = v;
    __syncthreads();
    const int first = (warp / WPR) * WPR;
    float t = 0.f;
#pragma unroll
    for (int i = 0; i < WPR; ++i) t += red[first + i];
    return t;
}
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
// Tensor-core building blocks (sm_80+: cp.async, ldmatrix, mma.sync m16n8k16), shared by matmul and
// flash attention. Shared-memory operands are 32-bit shared-space byte addresses (smem_addr).
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy that bypasses L1; bytes < 16 zero-fills the rest (0: all zeros, nothing
// read): ragged edges become zeros without branches around the copy. dst and src 16-byte aligned.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>  // wait until at most N of this thread's commit groups are still in flight
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Four 8x8 b16 matrices; lanes 8q..8q+7 give the row addresses of matrix q, register q receives it.
// Plain: lane l holds row l/4, cols 2(l%4), 2(l%4)+1. .trans: lane l holds rows 2(l%4), 2(l%4)+1 of col l/4.
__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

// c[16x8] += a[16x16] * b[16x8], fp32 accumulate. Fragments (g = lane / 4, t = lane % 4):
// a: {a0,a1} = A[g][2t..2t+1], {a2,a3} = A[g+8][2t..], {a4,a5} = A[g][2t+8..], {a6,a7} = A[g+8][2t+8..]
// b: {b0,b1} = B[2t..2t+1][g], {b2,b3} = B[2t+8..2t+9][g]; c: {c0,c1} = C[g][2t..2t+1], {c2,c3} = C[g+8][2t..].
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                                        unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__half>(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif
// ---- end of PRELUDE: line numbers restart at 1, so compiler errors count from the kernel's own text ----
#line 1
"""
"""Device helpers the CUDA starters share; a kernel opts in with `CUDA_SOURCE = nvrtc.PRELUDE + r\"\"\"...\"\"\"`.

It provides `<cuda_fp16.h>`, `<cuda_bf16.h>`, `INFINITY` (NVRTC has no `<math.h>`), `to_float(x)`
(float, __half, __nv_bfloat16 -> float), `from_float<T>(f)` (float -> T, round to nearest), `Vec<T, N>`
(N elements as one aligned 4/8/16-byte access, members `.v[k]`), `warp_sum(v)` (full-warp shuffle sum)
and `group_sum<WPR>(v, red)` (sum over the WPR warps sharing a row; `red` is `__shared__ float[warps]`;
it syncs the block when WPR > 1, so every thread must call it). On sm_80+ also the tensor-core building
blocks: `smem_addr(p)`, `cp_async16(dst, src, bytes)` (zero-fills past `bytes`), `cp_async_commit()`,
`cp_async_wait<N>()`, `ldsm_x4` / `ldsm_x4_trans` (ldmatrix .x4) and `mma16816<T>(c, a, b0, b1)`
(mma.sync m16n8k16, fp32 accumulate). A kernel must not redefine these names.

Explicit, not prepended by `build`: a kernel file then says what it uses, a source without it
compiles as written, and the cache key (over the whole source) changes when the prelude does. It
ends with `#line 1`, so compile errors name the line of the kernel's own CUDA text, as before.
"""


class CompileError(RuntimeError):
    """The CUDA source did not compile; `log` holds the compiler's own words, `lines` the error lines."""

    def __init__(self, message: str, *, log: str, lines: Sequence[int], source_name: str) -> None:
        super().__init__(message)
        self.log = log
        self.lines = tuple(lines)
        self.source_name = source_name


class LaunchError(RuntimeError):
    """A launch was refused before reaching the GPU (bad argument, tensor on the wrong device)."""


# -- typed scalars ---------------------------------------------------------------------------------
def i32(value: int) -> ctypes.c_int32:
    if not -(2**31) <= int(value) < 2**31:
        raise LaunchError(f"i32({value}) does not fit in int32: use i64 and a `long long` kernel parameter")
    return ctypes.c_int32(int(value))


def i64(value: int) -> ctypes.c_int64:
    return ctypes.c_int64(int(value))


def u32(value: int) -> ctypes.c_uint32:
    if not 0 <= int(value) < 2**32:
        raise LaunchError(f"u32({value}) does not fit in uint32")
    return ctypes.c_uint32(int(value))


def f32(value: float) -> ctypes.c_float:
    return ctypes.c_float(float(value))


def f64(value: float) -> ctypes.c_double:
    return ctypes.c_double(float(value))


_SCALAR_TYPES = (ctypes.c_int32, ctypes.c_int64, ctypes.c_uint32, ctypes.c_float, ctypes.c_double)


# -- toolchain discovery ---------------------------------------------------------------------------
@functools.cache  # called on every launch; a failed import is not cached (it raises)
def _core() -> Any:
    """The cuda.core namespace: `cuda.core` (>= 0.4) or `cuda.core.experimental` (older releases)."""
    try:
        import cuda.core as core

        if hasattr(core, "Program"):
            return core
    except ImportError:
        pass
    try:
        import cuda.core.experimental as core  # type: ignore[no-redef]
    except ImportError as exc:
        raise RuntimeError(
            "the CUDA backend needs NVIDIA's cuda.core (pip install cuda-python, or cuda-core plus "
            "cuda-bindings matching the driver's CUDA major version)"
        ) from exc
    return core


def toolchain_version() -> str:
    """cuda.core and cuda.bindings versions: part of the cache key (a new NVRTC rebuilds)."""
    parts = []
    for mod in ("cuda.core", "cuda.bindings"):
        try:
            parts.append(f"{mod}={__import__(mod, fromlist=['__version__']).__version__}")
        except (ImportError, AttributeError):
            parts.append(f"{mod}=?")
    return ",".join(parts)


def _has_cuda_headers(path: Path) -> bool:
    return (path / "cuda_fp16.h").is_file() and (path / "cuda_bf16.h").is_file()


@functools.lru_cache(maxsize=1)
def include_dirs() -> tuple[str, ...]:
    """Directories holding <cuda_fp16.h>, <cuda_bf16.h> and <mma.h>, best first.

    Looked for, in order: AUTOKERNEL_CUDA_INCLUDE, cuda.pathfinder's view of the CUDA runtime
    headers (a toolkit or the nvidia-cuda-runtime wheel), CUDA_HOME/CUDA_PATH, the nvcc on PATH,
    /usr/local/cuda, and the nvidia/*/include folders of installed wheels.
    """
    found: list[Path] = []
    explicit = os.environ.get("AUTOKERNEL_CUDA_INCLUDE")
    if explicit:
        found.extend(Path(p) for p in explicit.split(os.pathsep) if p)
    try:
        import cuda.pathfinder as pathfinder

        located = pathfinder.find_nvidia_header_directory("cudart")
        if located:
            found.append(Path(located))
    except Exception:  # noqa: BLE001 - pathfinder is optional and its errors vary by version
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            found.append(Path(os.environ[var]) / "include")
    nvcc = shutil.which("nvcc")
    if nvcc:
        found.append(Path(nvcc).resolve().parent.parent / "include")
    found.append(Path("/usr/local/cuda/include"))
    try:
        import nvidia  # namespace package of NVIDIA's wheels

        for root in getattr(nvidia, "__path__", []):
            found.extend(sorted(Path(root).glob("*/include")))
    except ImportError:
        pass
    result: list[str] = []
    for path in found:
        if path.is_dir() and _has_cuda_headers(path) and str(path.resolve()) not in result:
            result.append(str(path.resolve()))
    return tuple(result)


def device_arch(device: int | None = None) -> str:
    """`sm_XY` of a CUDA device (the current one by default), e.g. sm_90 on H100/H200."""
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device: the CUDA backend runs on NVIDIA GPUs (use compile_check to "
                           "compile without one)")
    return _arch_of(torch.cuda.current_device() if device is None else int(device))


@functools.cache
def _arch_of(index: int) -> str:
    major, minor = torch.cuda.get_device_capability(index)
    return f"sm_{major}{minor}"


# -- options and cache key -------------------------------------------------------------------------
def _define_list(defines: Defines) -> list[tuple[str, str]]:
    out = []
    for key, value in sorted((defines or {}).items()):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(key)):
            raise ValueError(f"define name {key!r} is not a C identifier")
        if isinstance(value, bool):
            value = int(value)
        text = str(value)
        if not re.fullmatch(r"[A-Za-z0-9_.+\-]*", text):
            raise ValueError(f"define {key}={text!r}: values are numbers or identifiers only")
        out.append((str(key), text))
    return out


def option_strings(defines: Defines = None, *, std: str = DEFAULT_STD, extra: Sequence[str] = ()) -> list[str]:
    """The compiler flags both NVRTC and nvcc get, in one canonical order (they feed the cache key)."""
    flags = [f"-std={std}"]
    flags += [f"-D{k}={v}" for k, v in _define_list(defines)]
    flags += list(extra)
    return flags


def cache_key(source: str, options: Sequence[str], arch: str, toolchain: str | None = None) -> str:
    """sha256 over everything that changes the cubin: source, flags, target arch and NVRTC version."""
    blob = json.dumps([source, list(options), arch, toolchain if toolchain is not None else toolchain_version()])
    return hashlib.sha256(blob.encode()).hexdigest()


def _cache_dir() -> Path | None:
    setting = os.environ.get(CACHE_ENV, "")
    if setting.lower() in ("off", "0", "false", "no"):
        return None
    if setting:
        return Path(setting)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autokernel-ci" / "cubin"


def _error_lines(log: str) -> list[int]:
    return sorted({int(m.group(1)) for m in _ERROR_LINE.finditer(log)})


def _compile_error(tool: str, source_name: str, arch: str, log: str) -> CompileError:
    lines = _error_lines(log)
    where = f" at line {', '.join(map(str, lines))}" if lines else ""
    first = next((ln.strip() for ln in log.splitlines() if "error" in ln), log.strip()[:300])
    return CompileError(
        f"{tool} could not compile {source_name} for {arch}{where}: {first}\n--- compiler log ---\n{log.strip()}",
        log=log,
        lines=lines,
        source_name=source_name,
    )


# -- NVRTC build -----------------------------------------------------------------------------------
@dataclass
class Module:
    """A compiled cubin; kernels are looked up (and loaded into the current context) on demand."""

    key: str
    arch: str
    cubin: bytes
    build_s: float
    origin: str  # "disk" (read from the cubin cache) or "" (compiled by NVRTC)
    _object: Any = None
    _kernels: dict[tuple[int, str], Any] = field(default_factory=dict)

    def kernel(self, name: str) -> Kernel:
        dev = torch.cuda.current_device()
        handle = self._kernels.get((dev, name))
        if handle is None:
            _set_current(dev)
            if self._object is None:
                self._object = _core().ObjectCode.from_cubin(self.cubin)
            try:
                handle = self._object.get_kernel(name)
            except Exception as exc:  # noqa: BLE001 - the driver's error type varies by version
                raise LaunchError(f"kernel {name!r} is not in the compiled module: declare it "
                                  f"`extern \"C\" __global__` ({exc})") from exc
            self._kernels[(dev, name)] = handle
        return Kernel(name=name, module=self, handle=handle)


@dataclass(frozen=True)
class Kernel:
    name: str
    module: Module
    handle: Any


_MODULES: dict[str, Module] = {}
_BUILT: dict[tuple, Module] = {}  # (source, defines, arch, std) -> module: the per-launch fast path
_LOCK = threading.Lock()


def _nvrtc_compile(source: str, options: list[str], arch: str, source_name: str) -> bytes:
    core = _core()
    defines = [tuple(o[2:].split("=", 1)) for o in options if o.startswith("-D")]
    std = next((o.split("=", 1)[1] for o in options if o.startswith("-std=")), DEFAULT_STD)
    extra = [o for o in options if not o.startswith(("-D", "-std="))]
    if extra:
        raise ValueError(f"options {extra} are not supported by the NVRTC path: use defines")
    opts = core.ProgramOptions(
        name=source_name,
        arch=arch,
        std=std,
        include_path=list(include_dirs()) or None,
        define_macro=defines or None,
        lineinfo=True,  # source lines in profiles (ncu, nsys); no cost at run time
    )
    log = io.StringIO()
    try:
        obj = core.Program(source, "c++", opts).compile("cubin", logs=log)
    except Exception as exc:  # noqa: BLE001 - NVRTCError in new releases, CUDAError / RuntimeError in old
        raise _compile_error("NVRTC", source_name, arch, (log.getvalue() + "\n" + str(exc)).strip()) from None
    code = obj.code
    return bytes(code) if not isinstance(code, (str, os.PathLike)) else Path(code).read_bytes()


def build(source: str, *, defines: Defines = None, arch: str | None = None, std: str = DEFAULT_STD,
          source_name: str = "kernel.cu") -> Module:
    """Compile `source` to a cubin (or fetch it from the cache) and return the module."""
    arch = arch or device_arch()
    # Kernel files call this on every launch: a hit must cost far less than a memory-bound kernel
    # (~40 us). The full cache key (JSON + SHA-256 over ~10 KB of source) took ~40 us a call; this
    # tuple hashes the source once per string object (Python caches str hashes): ~1 us a hit.
    try:
        memo_key: tuple | None = (source, tuple(sorted((defines or {}).items())), arch, std)
        memo = _BUILT.get(memo_key)
    except TypeError:  # an unhashable define value: take the slow path
        memo_key, memo = None, None
    if memo is not None:
        return memo
    options = option_strings(defines, std=std)
    key = cache_key(source, options, arch)
    with _LOCK:
        cached = _MODULES.get(key)
    if cached is not None:
        if memo_key is not None:
            _BUILT[memo_key] = cached
        return cached
    start = time.perf_counter()
    disk = _cache_dir()
    path = disk / f"{key}.cubin" if disk else None
    cubin, origin = None, ""
    if path is not None and path.is_file():
        try:
            cubin, origin = path.read_bytes(), "disk"
        except OSError:
            cubin = None
    if cubin is None:
        cubin = _nvrtc_compile(source, options, arch, source_name)
        if path is not None:
            _write_atomically(path, cubin)
    module = Module(key, arch, cubin, time.perf_counter() - start, origin)
    with _LOCK:
        module = _MODULES.setdefault(key, module)
    if memo_key is not None:
        _BUILT[memo_key] = module
    return module


def _write_atomically(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only or missing home only costs a rebuild next process


def compile_kernel(source: str, name: str, *, defines: Defines = None, arch: str | None = None,
                   source_name: str | None = None) -> Kernel:
    """Build (cached) and return the `extern "C"` kernel `name` of `source` for the current device."""
    module = build(source, defines=defines, arch=arch, source_name=source_name or f"{name}.cu")
    return module.kernel(name)


def clear_cache() -> None:
    """Forget in-process builds (the disk cache is kept)."""
    with _LOCK:
        _MODULES.clear()
        _BUILT.clear()


# -- launch ----------------------------------------------------------------------------------------
class _TorchStream:
    """Exposes a raw CUDA stream handle through the `__cuda_stream__` protocol cuda.core accepts."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


_STREAMS: dict[tuple[int, int], Any] = {}
_CURRENT: set[int] = set()


def _set_current(device_index: int) -> None:
    if device_index not in _CURRENT:
        torch.cuda.init()  # torch owns the primary context; cuda.core then binds to the same one
        _core().Device(device_index).set_current()
        _CURRENT.add(device_index)


def _stream(device_index: int) -> Any:
    handle = torch.cuda.current_stream(device_index).cuda_stream
    key = (device_index, handle)
    wrapped = _STREAMS.get(key)
    if wrapped is None:
        _set_current(device_index)
        wrapped = _core().Device(device_index).create_stream(_TorchStream(handle))
        _STREAMS[key] = wrapped
    return wrapped


def _dim3(value: int | Sequence[int], what: str) -> tuple[int, ...]:
    dims = (int(value),) if isinstance(value, int) else tuple(int(v) for v in value)
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise LaunchError(f"{what}={value!r}: give 1 to 3 positive sizes")
    return dims


def kernel_args(args: Iterable[Any], device_index: int) -> list[Any]:
    """Tensors become device pointers; scalars must already be typed (i32, i64, u32, f32, f64)."""
    out: list[Any] = []
    for pos, arg in enumerate(args):
        if isinstance(arg, torch.Tensor):
            if arg.device.type != "cuda" or arg.device.index != device_index:
                raise LaunchError(f"argument {pos} is on {arg.device}, the kernel runs on cuda:{device_index}")
            out.append(int(arg.data_ptr()))
        elif type(arg) in _SCALAR_TYPES:
            out.append(arg)
        elif arg is None:
            out.append(0)  # a null pointer, for optional buffers
        else:
            raise LaunchError(
                f"argument {pos} is a {type(arg).__name__} ({arg!r}): wrap scalars as nvrtc.i32 / i64 / u32 / "
                "f32 / f64 to name their C type (a bare Python int would be passed as a pointer)"
            )
    return out


# A launch may ask for up to 48 KiB of dynamic shared memory as is; more needs a per-kernel opt-in
# (Hopper allows 227 KiB a block: a 4-stage 128x128x64 bf16 GEMM pipeline needs 128 KiB).
STATIC_SHARED_LIMIT = 48 * 1024
_SHARED_OPT_IN: dict[tuple[int, str, str], int] = {}


def _allow_shared(kernel: Kernel, handle: Any, nbytes: int, dev: int) -> None:
    """Raise the kernel's dynamic shared-memory limit to nbytes on device dev (once per size)."""
    key = (dev, kernel.module.key, kernel.name)
    if _SHARED_OPT_IN.get(key, 0) >= nbytes:
        return
    from cuda.bindings import driver

    limit = torch.cuda.get_device_properties(dev).shared_memory_per_block_optin
    if nbytes > limit:
        raise LaunchError(f"kernel {kernel.name} asks for {nbytes} bytes of shared memory, device {dev} allows "
                          f"{limit} a block: use smaller tiles or fewer pipeline stages")
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    raw = getattr(handle, "handle", handle)
    if isinstance(raw, driver.CUkernel):  # cuLibrary-loaded code (cuda.core's ObjectCode)
        (err,) = driver.cuKernelSetAttribute(attr, nbytes, raw, driver.CUdevice(dev))
    else:
        (err,) = driver.cuFuncSetAttribute(raw, attr, nbytes)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise LaunchError(f"could not allow {nbytes} bytes of dynamic shared memory for {kernel.name}: {err}")
    _SHARED_OPT_IN[key] = nbytes


@functools.cache
def _launch_takes_stream_first(core: Any) -> bool:
    version = getattr(core, "__version__", None) or _core_version()
    nums = [int(p) for p in re.findall(r"\d+", version)[:2]] or [0, 0]
    return tuple(nums) >= (0, 3)  # 0.1/0.2: launch(kernel, config(stream=...), *args)


@functools.lru_cache(maxsize=1)
def _core_version() -> str:
    try:
        import cuda.core

        return str(cuda.core.__version__)
    except (ImportError, AttributeError):
        return "0.0"


def launch(kernel: Kernel, grid: int | Sequence[int], block: int | Sequence[int], args: Sequence[Any],
           shared_mem: int = 0) -> None:
    """Launch on torch's current stream of the current device."""
    core = _core()
    dev = torch.cuda.current_device()
    if kernel.module.arch != device_arch(dev):
        raise LaunchError(f"kernel {kernel.name} was built for {kernel.module.arch}, device {dev} is "
                          f"{device_arch(dev)}: build with arch=None")
    handle = kernel.module.kernel(kernel.name).handle  # per-device handle (loaded once per device)
    if shared_mem > STATIC_SHARED_LIMIT:
        _allow_shared(kernel, handle, int(shared_mem), dev)
    values = kernel_args(args, dev)
    stream = _stream(dev)
    grid3, block3 = _dim3(grid, "grid"), _dim3(block, "block")
    if _launch_takes_stream_first(core):
        config = core.LaunchConfig(grid=grid3, block=block3, shmem_size=int(shared_mem))
        core.launch(stream, config, handle, *values)
    else:
        config = core.LaunchConfig(grid=grid3, block=block3, stream=stream, shmem_size=int(shared_mem))
        core.launch(handle, config, *values)


# -- nvcc compile check (no GPU needed) ------------------------------------------------------------
@dataclass(frozen=True)
class CheckResult:
    """What `compile_check` built: the kernels (extern "C" symbols) in the cubin and how long it took."""

    arch: str
    kernels: tuple[str, ...]
    seconds: float
    cubin_bytes: int
    log: str


def _nvcc() -> str:
    for candidate in (shutil.which("nvcc"), *(str(Path(d).parent / "bin" / "nvcc") for d in include_dirs())):
        if candidate and Path(candidate).is_file():
            return candidate
    raise RuntimeError("nvcc not found: install the CUDA toolkit or put its bin/ on PATH")


def compile_check(source: str, arch: str = "sm_90", *, defines: Defines = None, std: str = DEFAULT_STD,
                  source_name: str = "kernel.cu") -> CheckResult:
    """Compile `source` with nvcc to a cubin with the same flags NVRTC gets; raise CompileError on failure.

    The source is written to a private temporary file and nvcc gets an argument list (no shell), so
    untrusted source text never reaches a shell.
    """
    if not re.fullmatch(r"(sm|compute)_\d+[a-z]?", arch):
        raise ValueError(f"arch={arch!r}: expected sm_XY, e.g. sm_90")
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+\.cu", source_name):
        raise ValueError(f"source_name={source_name!r}: a plain file name ending in .cu")
    options = option_strings(defines, std=std)
    with tempfile.TemporaryDirectory(prefix="autokernel-nvcc-") as tmp:
        src = Path(tmp) / source_name
        src.write_text(source)
        out = Path(tmp) / "out.cubin"
        cmd = [_nvcc(), f"-arch={arch}", "--cubin", "-lineinfo", *options, "-o", str(out), source_name]
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S, check=False)
        seconds = time.perf_counter() - start
        log = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0 or not out.is_file():
            raise _compile_error("nvcc", source_name, arch, log)
        data = out.read_bytes()
    return CheckResult(arch=arch, kernels=tuple(sorted(elf_function_symbols(data))), seconds=seconds,
                       cubin_bytes=len(data), log=log)


def elf_function_symbols(data: bytes) -> list[str]:
    """Names of the global function symbols of an ELF64 file (a cubin's kernels)."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not an ELF64 file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names: list[str] = []
    for sec in sections:
        if sec[1] != 2:  # SHT_SYMTAB
            continue
        strtab = sections[sec[6]]
        str_off = strtab[4]
        offset, size, entsize = sec[4], sec[5], sec[9] or 24
        for pos in range(offset, offset + size, entsize):
            st_name, st_info = struct.unpack_from("<IB", data, pos)
            if st_info >> 4 == 1 and st_info & 0xF == 2:  # STB_GLOBAL, STT_FUNC
                end = data.index(b"\x00", str_off + st_name)
                names.append(data[str_off + st_name:end].decode())
    return names
