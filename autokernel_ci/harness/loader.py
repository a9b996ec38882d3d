"""Import a candidate kernel file (untrusted) into this process, guarded.

Order matters: the checker's modules are imported and the tamper snapshot taken first, then the
candidate is imported, then the snapshot is compared. The input seed does not exist in this process
yet at import time (it is read afterwards, see worker.py), so import-time code cannot know it.
"""

from __future__ import annotations

import gc
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from autokernel_ci import kernelfile
from autokernel_ci.harness import faults, guard
from autokernel_ci.harness.results import Status

_loaded = 0


@dataclass
class Candidate:
    path: Path
    kernel: kernelfile.KernelFile
    module: ModuleType
    fn: Any
    kernel_names: tuple[str, ...]  # the candidate's own device kernels (jit functions, __global__ names)
    snapshot: guard.Snapshot = field(repr=False, default_factory=guard.Snapshot)

    @property
    def module_name(self) -> str:
        return self.module.__name__


@dataclass
class LoadFailure:
    status: Status
    reason: str
    check: str = "load"
    kernel: kernelfile.KernelFile | None = None


def load_candidate(path: str | Path, *, device: str = "cpu") -> Candidate | LoadFailure:
    """Parse statically, then import under the tamper guard. Never raises for a bad candidate."""
    global _loaded
    path = Path(path)
    try:
        kf = kernelfile.load(path)
    except kernelfile.KernelFileError as exc:
        return LoadFailure(Status.INVALID, str(exc), check="contract")
    if kf.backend == "cuda" and device != "cuda":
        return LoadFailure(Status.INVALID, f"{path}: BACKEND='cuda' needs a GPU (device={device!r}); "
                           "verify it on a CUDA machine or write a Triton kernel", check="backend", kernel=kf)
    import torch  # noqa: F401 - the checker's imports come before the candidate's
    import triton  # noqa: F401

    import autokernel_ci.compare  # noqa: F401
    import autokernel_ci.harness.calls  # noqa: F401
    import autokernel_ci.harness.stages  # noqa: F401

    _loaded += 1
    gc.collect()  # the previous candidate's run (and its seed) must be gone before this one imports
    name = f"autokernel_candidate_{kf.source_hash}_{_loaded}"
    snap = guard.take_snapshot()
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module  # triton's jit looks its globals up through the module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except BaseException as exc:  # noqa: BLE001 - any failure of untrusted code is a verdict
        sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        status = faults.classify(exc)
        if isinstance(exc, ImportError):
            status = Status.INVALID
        return LoadFailure(status, f"importing the kernel failed: {faults.describe(exc)}", check="import", kernel=kf)
    changes = guard.find_tampering(snap)
    if changes:
        return LoadFailure(Status.FAIL, "tampering at import: " + "; ".join(changes), check="tampering", kernel=kf)
    fn = getattr(module, "kernel_fn", None)
    if not callable(fn):
        return LoadFailure(Status.INVALID, f"{path}: kernel_fn is not callable after import", check="contract",
                           kernel=kf)
    return Candidate(path=path, kernel=kf, module=module, fn=fn,
                     kernel_names=kernelfile.own_kernel_names(module, kf.source), snapshot=snap)


def unload(candidate: Candidate) -> None:
    sys.modules.pop(candidate.module_name, None)
