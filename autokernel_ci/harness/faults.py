"""Classify what went wrong when a candidate raised: crash, OOM or compile error (never executes anything)."""

from __future__ import annotations

import traceback

from autokernel_ci.harness.results import Status

# How much of a traceback a verdict keeps: the last frames are the ones that name the bad line.
TRACEBACK_TAIL_CHARS = 1500

_OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory", "defaultcpuallocator")
_CUDA_FATAL_MARKERS = ("illegal memory access", "illegal address", "cuda error", "device-side assert",
                       "unspecified launch failure", "misaligned address", "cuda_error")
_COMPILE_CLASS_MARKERS = ("compilationerror", "nvrtc", "compileerror", "compilererror")


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return seen


def _raised_in_triton_frontend(exc: BaseException) -> bool:
    """True when the innermost frame is Triton's language front end (semantic checks such as
    `arange's range must be a power of 2`): under TRITON_INTERPRET that is where compile errors surface."""
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None:
        return False
    path = last.tb_frame.f_code.co_filename.replace("\\", "/")
    return "/triton/language/" in path or "/triton/compiler/" in path


def classify(exc: BaseException) -> Status:
    """The verdict status for an exception a candidate raised while loading or running."""
    chain = _chain(exc)
    for e in chain:
        name = type(e).__name__.lower()
        if isinstance(e, MemoryError) or name == "outofmemoryerror" or any(
                m in str(e).lower() for m in _OOM_MARKERS):
            return Status.OOM
    for e in chain:
        if any(m in type(e).__name__.lower() for m in _COMPILE_CLASS_MARKERS) or (
                isinstance(e, ValueError | TypeError | AssertionError) and _raised_in_triton_frontend(e)):
            return Status.COMPILE_ERROR
    return Status.CRASH


def poisons_cuda_context(exc: BaseException) -> bool:
    """An illegal address or device assert leaves the CUDA context unusable: the worker must go."""
    return any(m in str(e).lower() for e in _chain(exc) for m in _CUDA_FATAL_MARKERS) or any(
        type(e).__name__ == "AcceleratorError" for e in _chain(exc))


def traceback_tail(exc: BaseException, limit: int = TRACEBACK_TAIL_CHARS) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-limit:].strip()


def describe(exc: BaseException) -> str:
    """One line for the verdict's reason, then the traceback tail."""
    return f"{type(exc).__name__}: {str(exc).strip()[:300]}\n{traceback_tail(exc)}"
