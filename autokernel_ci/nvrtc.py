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

Arch-specific targets: `build(..., arch=arch_specific(device_arch()))` compiles for sm_90a on an sm_90 device
(wgmma, setmaxnreg); launch accepts a module built for the device's arch or its "a" variant, nothing else
(`runs_on`). TMA: `tensor_map(t, box, swizzle=128)` encodes a 2-D tensor's CUtensorMap (cuda.bindings) into a
cached 128-byte device tensor a kernel takes as a pointer.

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
import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
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
# The text lives in prelude.cuh beside this module (a CUDA file editors and nvcc read as CUDA); read once at
# import, byte for byte, so a cache key over the source is the same as when it was a string here.
PRELUDE = (Path(__file__).with_name("prelude.cuh")).read_text(encoding="utf-8")
"""Device helpers the CUDA starters share; a kernel opts in with `CUDA_SOURCE = nvrtc.PRELUDE + r\"\"\"...\"\"\"`.

It provides `<cuda_fp16.h>`, `<cuda_bf16.h>`, `INFINITY` (NVRTC has no `<math.h>`), `to_float(x)`
(float, __half, __nv_bfloat16 -> float), `from_float<T>(f)` (float -> T, round to nearest), `Vec<T, N>`
(N elements as one aligned 4/8/16-byte access, members `.v[k]`), `warp_sum(v)` (full-warp shuffle sum)
and `group_sum<WPR>(v, red)` (sum over the WPR warps sharing a row; `red` is `__shared__ float[warps]`;
it syncs the block when WPR > 1, so every thread must call it), `fast_exp2(x)` (2^x on the SFU, ~2 ulp) and
`LOG2E`; for one-read row kernels `online_merge` / `online_fold<N>` (running max and sum of exp), the functor
`OnlineLse`, `load_vec<STREAM>(p)` / `store_vec<STREAM>(p, v)` (a vector load / store, evict-first when STREAM),
`vec_head<T, VEC>(row, n)` (elements
before a row's first vector boundary), `scan_vecs<T, VEC, LOADS[, STREAM]>(body, nvec, tid, nthreads, f[, keep,
nkeep])` (vectors handed to the functor f, LOADS a thread in flight, optionally copied to `keep` as read) and
`scan_row<T, VEC, LOADS[, STREAM]>(row, n, tid, nthreads, f)` (every element of a row once: scalar head, scan_vecs,
scalar tail). On sm_80+ also the tensor-core
building blocks:
`smem_addr(p)`, `cp_async16(dst, src, bytes)` (zero-fills past `bytes`), `cp_async_commit()`,
`cp_async_wait<N>()`, `ldsm_x4` / `ldsm_x4_trans` (ldmatrix .x4) and `mma16816<T>(c, a, b0, b1)`
(mma.sync m16n8k16, fp32 accumulate). On the arch-specific sm_90a target only (`__CUDA_ARCH_FEAT_SM90_ALL`):
the Hopper blocks `mbar_init` / `mbar_arrive_expect_tx` / `mbar_arrive` / `mbar_wait`, `tma_load_2d`,
`tma_load_2d_multicast`, `cluster_ctarank` / `mbar_arrive_cluster` / `cluster_sync` (thread-block clusters),
`tensormap_acquire`, `wg_desc` / `desc_plus`, `wg_fence` / `wg_commit` / `wg_wait<N>` / `wg_fence_acc`,
`Wgmma<T, N, TRANS_B>` (shared-memory A, N = 64 / 128 / 256) and `WgmmaRS<T, N, TRANS_B>` (register A,
N = 64 / 128), used by matmul's Part 3 and flash attention's "wgmma" variant. A kernel must not redefine these names.

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


_CUDA_SEEN: list[bool] = []  # one entry once torch.cuda.is_available() said yes (~1 us a call: asked once)


def current_device() -> int:
    """torch's current CUDA device, or a RuntimeError that says the CUDA backend needs an NVIDIA GPU."""
    if not _CUDA_SEEN:
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device: the CUDA backend runs on NVIDIA GPUs (use compile_check to "
                               "compile without one)")
        _CUDA_SEEN.append(True)
    return torch.cuda.current_device()


def device_arch(device: int | None = None) -> str:
    """`sm_XY` of a CUDA device (the current one by default), e.g. sm_90 on H100/H200."""
    current = current_device()
    return _arch_of(current if device is None else int(device))


@functools.cache
def _arch_of(index: int) -> str:
    major, minor = torch.cuda.get_device_capability(index)
    return f"sm_{major}{minor}"


def arch_specific(arch: str) -> str:
    """The arch-specific target of `sm_XY` (`sm_90` -> `sm_90a`): it adds the features of exactly that arch (sm_90a:
    wgmma, setmaxnreg, TMA tensor-map fences), and its cubin runs on sm_XY devices only."""
    if not re.fullmatch(r"sm_\d+a?", arch):
        raise ValueError(f"arch={arch!r}: expected sm_XY")
    return arch if arch.endswith("a") else arch + "a"


def runs_on(module_arch: str, device: str) -> bool:
    """Whether a cubin built for `module_arch` may be launched on a `device` arch: the same sm_XY, or its
    arch-specific sm_XYa (never across arches: sm_90a code on sm_100, or sm_80 code on sm_90, is refused)."""
    return module_arch in (device, device + "a")


WGMMA_ARCH = "sm_90a"  # wgmma / setmaxnreg / tensor-map fences: arch-specific to sm_90 (H100, H200)


def wgmma_arch(device: torch.device) -> str | None:
    """The arch the Hopper wgmma kernels are built for on `device`: sm_90a on an sm_90 GPU, None anywhere else
    (CPU, sm_80 / sm_89 without wgmma, sm_100+ whose tensor cores take tcgen05): the caller then runs its
    mma.sync path."""
    if device.type != "cuda" or device_arch(device.index) != "sm_90":
        return None
    return WGMMA_ARCH


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
    _kernels: dict[tuple[int, str], Kernel] = field(default_factory=dict)

    def kernel(self, name: str) -> Kernel:
        """`name` loaded for the current device (once a device: later calls are a dict lookup)."""
        dev = torch.cuda.current_device()
        kernel = self._kernels.get((dev, name))
        if kernel is None:
            if not runs_on(self.arch, device_arch(dev)):  # before the driver sees the cubin: its error says less
                raise LaunchError(f"kernel {name} was built for {self.arch}, device {dev} is {device_arch(dev)}: "
                                  "build with arch=None (or arch_specific(device_arch()))")
            _set_current(dev)
            if self._object is None:
                self._object = _core().ObjectCode.from_cubin(self.cubin)
            try:
                handle = self._object.get_kernel(name)
            except Exception as exc:  # noqa: BLE001 - the driver's error type varies by version
                raise LaunchError(f"kernel {name!r} is not in the compiled module: declare it "
                                  f"`extern \"C\" __global__` ({exc})") from exc
            kernel = Kernel(name, self, handle, dev)
            self._kernels[(dev, name)] = kernel
        return kernel


@dataclass(frozen=True)
class Kernel:
    name: str
    module: Module
    handle: Any  # loaded on `device` (Module.kernel refuses a device whose arch the cubin does not suit)
    device: int


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


_KERNELS: dict[tuple, Kernel] = {}  # (source, name, defines, arch, source name, device) -> kernel: compile_kernel's hit


def compile_kernel(source: str, name: str, *, defines: Defines = None, arch: str | None = None,
                   source_name: str | None = None) -> Kernel:
    """Build (cached) and return the `extern "C"` kernel `name` of `source` for the current device."""
    # Kernel files call this on every launch: a hit is one dict lookup (~1 us; build + Module.kernel took 5.4 us an
    # H100 call, more than the GPU time of a small row kernel).
    dev = current_device()
    try:
        memo_key: tuple | None = (source, name, tuple(sorted((defines or {}).items())), arch, source_name, dev)
        hit = _KERNELS.get(memo_key)
    except TypeError:  # an unhashable define value: take the slow path
        memo_key, hit = None, None
    if hit is not None:
        return hit
    module = build(source, defines=defines, arch=arch, source_name=source_name or f"{name}.cu")
    kernel = module.kernel(name)
    if memo_key is not None:
        _KERNELS[memo_key] = kernel
    return kernel


def clear_cache() -> None:
    """Forget in-process builds (the disk cache is kept)."""
    with _LOCK:
        _MODULES.clear()
        _BUILT.clear()
        _KERNELS.clear()


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


# torch's current stream as a raw handle: 0.12 us a call on an H100 against 1.7 us through
# torch.cuda.current_stream(dev).cuda_stream (a Stream object a call); the public route where torch lacks it.
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _raw_stream(device_index: int) -> int:
    """The raw handle of torch's current stream on the device."""
    if _RAW_STREAM is not None:
        return _RAW_STREAM(device_index)
    return torch.cuda.current_stream(device_index).cuda_stream


def _stream(device_index: int) -> Any:
    handle = _raw_stream(device_index)
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
            if arg.get_device() != device_index:  # -1 off the GPU; an int, no torch.device built a tensor
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


def remembered(store: dict, key: Hashable, make: Callable[..., Any], *args: Any, size: int = 64) -> Any:
    """store[key], made by make(*args) on a miss. The launch paths keep what a call derives from its CONFIG or
    geometry here (a lookup instead of microseconds of Python a call); the store is emptied when it holds `size`
    entries (a model needs a few dozen, so a full store means churn, not a working set)."""
    value = store.get(key)
    if value is None:
        if len(store) >= size:
            store.clear()
        value = store[key] = make(*args)
    return value


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device: torch.device) -> int:
    """SMs of a CUDA device, read once a device: persistent grids ask on every launch, and on an H100 host
    get_device_properties costs 2.0 us a call against 0.14 us for this lookup (timeit, h200.md seventeenth session)."""
    return _sm_count(device.index if device.index is not None else torch.cuda.current_device())


# A launch may use up to 48 KiB of shared memory, static and dynamic together, as is; more needs a per-kernel opt-in
# of the dynamic part (Hopper allows 227 KiB a block: a 4-stage 128x128x64 bf16 GEMM pipeline needs 128 KiB). A
# kernel with 1 KiB of static reduction buffers and exactly 48 KiB dynamic is past it (CUDA_ERROR_INVALID_VALUE).
STATIC_SHARED_LIMIT = 48 * 1024
_SHARED_ALLOWED: dict[tuple[int, str, str], int] = {}
_STATIC_SHARED: dict[tuple[int, str, str], int] = {}


SM90_SHARED_BYTES = 227 * 1024  # opt-in dynamic shared memory a block on sm_90 (H100 / H200)


def shared_memory_limit(device: torch.device) -> int:
    """Dynamic shared memory one block may use on `device` (launch opts a kernel in past 48 KiB); the sm_90
    figure where there is no GPU (builds and CPU tests size their pipelines with it)."""
    if device.type != "cuda":
        return SM90_SHARED_BYTES
    return _shared_optin(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _shared_optin(index: int) -> int:  # kernel files ask every launch; get_device_properties: see sm_count
    return torch.cuda.get_device_properties(index).shared_memory_per_block_optin


def _static_shared(kernel: Kernel, handle: Any, dev: int) -> int:
    """Static shared memory of the kernel (the driver's CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: its __shared__ arrays;
    for sm_90 cuobjdump lists 1 KiB more than the arrays), read once a kernel."""
    key = (dev, kernel.module.key, kernel.name)
    if key not in _STATIC_SHARED:
        from cuda.bindings import driver

        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
        raw = getattr(handle, "handle", handle)
        if isinstance(raw, driver.CUkernel):
            err, value = driver.cuKernelGetAttribute(attr, raw, driver.CUdevice(dev))
        else:
            err, value = driver.cuFuncGetAttribute(attr, raw)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise LaunchError(f"could not read the static shared memory of {kernel.name}: {err}")
        _STATIC_SHARED[key] = int(value)
    return _STATIC_SHARED[key]


def dynamic_shared_limit(kernel: Kernel, device: torch.device) -> int:
    """Dynamic shared memory a launch of `kernel` may ask for on `device`: the device's limit a block less the
    kernel's own __shared__ arrays (read from the driver once a kernel)."""
    dev = device.index if device.index is not None else torch.cuda.current_device()
    handle = kernel.module.kernel(kernel.name).handle
    return shared_memory_limit(device) - _static_shared(kernel, handle, dev)


def _allow_shared(kernel: Kernel, handle: Any, nbytes: int, dev: int, static: int, opt_in: bool) -> None:
    """Check nbytes of dynamic shared memory (+ `static` bytes of __shared__ arrays) against device dev's limit a
    block, raise the kernel's dynamic limit to nbytes where `opt_in`, and record the size as allowed."""
    key = (dev, kernel.module.key, kernel.name)
    limit = shared_memory_limit(torch.device("cuda", dev))
    if nbytes + static > limit:
        raise LaunchError(f"kernel {kernel.name} asks for {nbytes} bytes of shared memory (+ {static} static), "
                          f"device {dev} allows {limit} a block: use smaller tiles or fewer pipeline stages")
    if not opt_in:
        _SHARED_ALLOWED[key] = nbytes
        return
    from cuda.bindings import driver

    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    raw = getattr(handle, "handle", handle)
    if isinstance(raw, driver.CUkernel):  # cuLibrary-loaded code (cuda.core's ObjectCode)
        (err,) = driver.cuKernelSetAttribute(attr, nbytes, raw, driver.CUdevice(dev))
    else:
        (err,) = driver.cuFuncSetAttribute(raw, attr, nbytes)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise LaunchError(f"could not allow {nbytes} bytes of dynamic shared memory for {kernel.name}: {err}")
    _SHARED_ALLOWED[key] = nbytes


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


LAUNCH_CONFIG_CACHE_SIZE = 4096  # (grid, block, shared bytes) points kept; a model's shapes need a few dozen
_CONFIGS: dict[tuple, Any] = {}


def _launch_config(core: Any, grid: int | Sequence[int], block: int | Sequence[int], shared_mem: int) -> Any:
    """cuda.core's LaunchConfig for this launch geometry, built (and checked) once a geometry: 0.75 us a build on an
    H100 plus the checks, against a dict lookup."""
    key = (grid if isinstance(grid, int) else tuple(grid), block if isinstance(block, int) else tuple(block),
           shared_mem)
    return remembered(_CONFIGS, key, _new_launch_config, core, grid, block, shared_mem, size=LAUNCH_CONFIG_CACHE_SIZE)


def _new_launch_config(core: Any, grid: int | Sequence[int], block: int | Sequence[int], shared_mem: int) -> Any:
    return core.LaunchConfig(grid=_dim3(grid, "grid"), block=_dim3(block, "block"), shmem_size=int(shared_mem))


def launch(kernel: Kernel, grid: int | Sequence[int], block: int | Sequence[int], args: Sequence[Any],
           shared_mem: int = 0) -> None:
    """Launch on torch's current stream of the current device."""
    # The path a call takes once this kernel has run at this geometry on this device is lookups only: 15.4 us a
    # call on an H100 before (arch, handle, stream object, config rebuilt every call), cuda.core's launch 4.6 us.
    core = _core()
    dev = torch.cuda.current_device()
    if dev != kernel.device:
        kernel = kernel.module.kernel(kernel.name)  # this device's handle (loaded and its arch checked once a device)
    handle = kernel.handle
    # One dict lookup a launch once this kernel has run at this size: the static size is read and the opt-in made
    # (past 48 KiB with the static arrays counted) on its first launch.
    if shared_mem > 0 and _SHARED_ALLOWED.get((dev, kernel.module.key, kernel.name), 0) < shared_mem:
        static = _static_shared(kernel, handle, dev)
        _allow_shared(kernel, handle, int(shared_mem), dev, static, opt_in=shared_mem + static > STATIC_SHARED_LIMIT)
    values = kernel_args(args, dev)
    stream = _stream(dev)
    if _launch_takes_stream_first(core):
        core.launch(stream, _launch_config(core, grid, block, shared_mem), handle, *values)
    else:  # the stream is part of the config in cuda.core 0.1 / 0.2: built a call
        config = core.LaunchConfig(grid=_dim3(grid, "grid"), block=_dim3(block, "block"), stream=stream,
                                   shmem_size=int(shared_mem))
        core.launch(handle, config, *values)


# -- TMA tensor maps (sm_90+) -----------------------------------------------------------------------
class TensorMapError(RuntimeError):
    """No tensor map for this tensor (no cuda.bindings, unaligned base or stride, the driver refused it)."""


_WARNED: set[str] = set()


def warn_once(message: str) -> None:
    """A RuntimeWarning the first time this process sees `message` (kernel files may not import warnings)."""
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


TENSOR_MAP_CACHE_SIZE = 256  # encoded maps kept (LRU); one GEMM call needs two


@dataclass
class _TensorMap:
    device_bytes: torch.Tensor  # the 128-byte CUtensorMap in device memory (64-byte aligned)
    stream: Any  # the stream its copy was queued on
    ready: Any  # torch.cuda.Event recorded after that copy
    streams: set[int] = field(default_factory=set)  # raw handles of the streams that may read it (the copy's first)


_TENSOR_MAPS: dict[tuple, _TensorMap] = {}
_TMA_DTYPES = {torch.float16: "FLOAT16", torch.bfloat16: "BFLOAT16", torch.float32: "FLOAT32", torch.uint8: "UINT8"}


@functools.cache
def _driver_bindings_missing() -> str | None:
    try:
        from cuda.bindings import driver  # noqa: F401
    except ImportError:
        return "cuda.bindings is not installed (pip install cuda-bindings): no TMA tensor maps"
    return None


def tensor_maps_unusable() -> str | None:
    """Why tensor_map cannot serve a call now (None when it can): checked before a kernel pads or prepares
    anything for its TMA path, so a fallback costs nothing."""
    if (_CUDA_SEEN or torch.cuda.is_available()) and torch.cuda.is_current_stream_capturing():
        # A captured kernel would keep the map's address after the cache evicts and reuses it.
        return "no tensor maps during CUDA graph capture: the kernel's non-TMA path serves graphs"
    return _driver_bindings_missing()


L2_PROMOTIONS = (0, 64, 128, 256)  # bytes the L2 fetches from DRAM per TMA request (0: the request's sectors only)


def tensor_map_layout(t: torch.Tensor, box: Sequence[int], swizzle: int,
                      l2_promotion: int = 256) -> tuple[int, int, int, int, int]:
    """TMA's rules for a 2-D map of t (any device): (rows, cols, row stride in bytes, box rows, box cols), or
    TensorMapError naming the rule t breaks. The CPU tests' stand-in maps apply the same rules through it."""
    if t.dim() != 2:
        raise TensorMapError(f"tensor maps are built here for 2-D tensors, got shape {tuple(t.shape)}: view it as rows")
    if t.dtype not in _TMA_DTYPES:
        raise TensorMapError(f"no TMA element type for {t.dtype}")
    rows, cols = t.shape
    es = t.element_size()
    box_rows, box_cols = (int(v) for v in box)
    if cols > 1 and t.stride(1) != 1:
        raise TensorMapError("TMA needs unit-stride rows (the innermost dimension is contiguous)")
    # A size-1 dimension's stride is never used: give it the smallest legal value.
    stride = t.stride(0) * es if rows > 1 else -(-cols * es // 16) * 16
    if t.data_ptr() % 16 or stride % 16:
        raise TensorMapError(f"TMA needs a 16-byte aligned base and row stride (base % 16 = {t.data_ptr() % 16}, "
                             f"row stride {stride} bytes)")
    if swizzle not in (0, 32, 64, 128) or (swizzle and box_cols * es > swizzle) or (box_cols * es) % 16:
        raise TensorMapError(f"box row of {box_cols * es} bytes does not suit swizzle {swizzle}")
    if not (1 <= box_rows <= 256 and 1 <= box_cols <= 256):
        raise TensorMapError(f"box {box_rows} x {box_cols}: each side 1..256")
    if type(l2_promotion) is not int or l2_promotion not in L2_PROMOTIONS:
        raise TensorMapError(f"l2_promotion={l2_promotion} is not one of {L2_PROMOTIONS} (bytes)")
    return rows, cols, stride, box_rows, box_cols


def tensor_map(t: torch.Tensor, box: Sequence[int], *, swizzle: int = 128, l2_promotion: int = 256) -> torch.Tensor:
    """A TMA descriptor (the driver's 128-byte CUtensorMap, cuTensorMapEncodeTiled) for the 2-D CUDA tensor t, in
    device memory: pass the returned uint8 tensor as a kernel argument (a pointer; in the kernel it is the global
    address cp.async.bulk.tensor takes, after `fence.proxy.tensormap::generic.acquire.gpu [map], 128`).

    box = (rows, cols) of the tile one copy moves; swizzle = 0, 32, 64 or 128: the shared-memory swizzle, whose
    span bounds a box row (cols * element size <= swizzle bytes). Elements outside t arrive as zeros. t's rows
    must be unit-stride with a 16-byte aligned base and row stride (TMA's rules); else TensorMapError.
    l2_promotion (one of L2_PROMOTIONS): how many bytes around each request the L2 fetches from DRAM.

    Cached by everything the map encodes (device, address, shape, row stride, dtype, box, swizzle, L2 promotion), so
    a repeated call costs a dict lookup: no encode, no copy. A new map goes to the device by a 128-byte copy on torch's
    current stream (ordered before the kernel that reads it; no device-wide sync); a later caller on another
    stream waits for that copy and marks the bytes used by its stream, so eviction cannot recycle them under its
    kernels. 64-byte aligned, as the driver requires. Refused during CUDA graph capture (the caller falls back).
    """
    dev = t.get_device()
    if dev < 0 or type(l2_promotion) is not int:  # 256.0 would hit 256's entry: the rules refuse it first
        tensor_map_layout(t, box, swizzle, l2_promotion)  # a broken rule names itself, on any device
        raise TensorMapError(f"tensor maps describe CUDA memory, got a tensor on {t.device}")
    why = tensor_maps_unusable()
    if why:
        raise TensorMapError(why)
    # Keyed by the tensor's own facts, so a hit skips the layout rules (they held when the map was made): a hit
    # cost ~8 us an H100 call with them and torch's Stream objects, three maps a GEMM call.
    key = (dev, t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, tuple(box), swizzle, l2_promotion)
    handle = _raw_stream(dev)
    with _LOCK:
        entry = _TENSOR_MAPS.pop(key, None)
        if entry is None:
            rows, cols, stride, box_rows, box_cols = tensor_map_layout(t, box, swizzle, l2_promotion)
            blob = _encode_tiled(t, rows, cols, stride, box_rows, box_cols, swizzle, l2_promotion)
            stream = torch.cuda.current_stream(dev)
            room = torch.empty(128 + 64, dtype=torch.uint8, device=t.device)
            start = (-room.data_ptr()) % 64
            entry = _TensorMap(room[start:start + 128], stream, torch.cuda.Event(), {handle})
            entry.device_bytes.copy_(torch.frombuffer(bytearray(blob), dtype=torch.uint8), non_blocking=True)
            entry.ready.record(stream)
            while len(_TENSOR_MAPS) >= TENSOR_MAP_CACHE_SIZE:
                # The freed bytes go back to torch's caching allocator, which reuses them only after the work
                # queued so far on every stream that used them (record_stream below) has run.
                _TENSOR_MAPS.pop(next(iter(_TENSOR_MAPS)))
        elif handle not in entry.streams:
            stream = torch.cuda.current_stream(dev)
            stream.wait_event(entry.ready)  # the copy that filled the map runs before this stream reads it
            entry.device_bytes.record_stream(stream)  # not reused while this stream's kernels may read it
            entry.streams.add(handle)
        _TENSOR_MAPS[key] = entry  # most recently used last
    return entry.device_bytes


def _encode_tiled(t: torch.Tensor, rows: int, cols: int, stride: int, box_rows: int, box_cols: int,
                  swizzle: int, l2_promotion: int) -> bytes:
    from cuda.bindings import driver  # present: tensor_maps_unusable() said so

    kinds = driver.CUtensorMapSwizzle
    mode = {0: kinds.CU_TENSOR_MAP_SWIZZLE_NONE, 32: kinds.CU_TENSOR_MAP_SWIZZLE_32B,
            64: kinds.CU_TENSOR_MAP_SWIZZLE_64B, 128: kinds.CU_TENSOR_MAP_SWIZZLE_128B}[swizzle]
    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    err, tmap = driver.cuTensorMapEncodeTiled(
        getattr(driver.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{_TMA_DTYPES[t.dtype]}"),
        2,
        t.data_ptr(),
        [u64(cols), u64(rows)],  # innermost dimension first
        [u64(stride)],
        [u32(box_cols), u32(box_rows)],
        [u32(1), u32(1)],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        mode,
        getattr(driver.CUtensorMapL2promotion,
                f"CU_TENSOR_MAP_L2_PROMOTION_{f'L2_{l2_promotion}B' if l2_promotion else 'NONE'}"),
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,  # zeros past the edges
    )
    if err != driver.CUresult.CUDA_SUCCESS:
        raise TensorMapError(f"cuTensorMapEncodeTiled refused {rows} x {cols} {t.dtype} (row stride {stride} B, box "
                             f"{box_rows} x {box_cols}, swizzle {swizzle}): {err}")
    return b"".join(int(word).to_bytes(8, "little") for word in tmap.opaque)


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
                  source_name: str = "kernel.cu", ptxas_verbose: bool = False,
                  keep_cubin: Path | None = None, keep_ptx: Path | None = None) -> CheckResult:
    """Compile `source` with nvcc to a cubin with the same flags NVRTC gets; raise CompileError on failure.

    ptxas_verbose adds `--ptxas-options=-v`: the log then holds each kernel's registers, stack and spill bytes.
    keep_cubin: a path the cubin is copied to (for cuobjdump -sass). keep_ptx: a path the PTX of the same
    compile is copied to (nvcc -keep leaves it beside the source; e.g. to see a load's cache policy).

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
        if ptxas_verbose:
            cmd.insert(-3, "--ptxas-options=-v")
        if keep_ptx is not None:
            cmd.insert(-3, "-keep")
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S, check=False)
        seconds = time.perf_counter() - start
        log = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0 or not out.is_file():
            raise _compile_error("nvcc", source_name, arch, log)
        data = out.read_bytes()
        if keep_cubin is not None:
            Path(keep_cubin).write_bytes(data)
        if keep_ptx is not None:
            Path(keep_ptx).write_text(src.with_suffix(".ptx").read_text())
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
