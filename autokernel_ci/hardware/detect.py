"""Which GPU is this? Match torch's device properties against gpu_specs/.

`identify()` is pure (any object with torch's property names will do, so it is testable on a
CPU); `probe()` reads the real device; `detect()` is what the rest of the package calls. An
unknown GPU gets no spec at all: made-up peaks would make every "% of ceiling" and every
physical-floor check a lie.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from autokernel_ci.hardware.specs import GpuSpec, all_specs, load_spec

# Force a spec by key when the device name is one the files do not know (a cloud's renamed SKU).
FORCE_ENV = "AUTOKERNEL_GPU_SPEC"
_GIB = 2**30

MATCHED, UNKNOWN, AMBIGUOUS, NO_GPU, FORCED = "matched", "unknown", "ambiguous", "no_gpu", "forced"


class UnknownGpuWarning(UserWarning):
    """The device is not in gpu_specs/: roofline ceilings are off until a spec file is added."""


class DeviceProperties(Protocol):
    """The attributes of torch.cuda.get_device_properties() this module reads."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int


@dataclass(frozen=True)
class DeviceInfo:
    """What torch says about the device, as plain data (for reports and the plan's `gpu`)."""

    index: int
    name: str
    vendor: str  # nvidia | amd
    compute_capability: str | None  # "9.0" (NVIDIA)
    gfx_arch: str | None  # "gfx942" (AMD, without the :sramecc+:xnack- feature suffix)
    total_memory_gib: float
    multiprocessors: int
    l2_cache_mb: float | None = None

    @classmethod
    def from_props(cls, props: Any, index: int = 0) -> DeviceInfo:
        arch = str(getattr(props, "gcnArchName", "") or "")
        gfx = arch.split(":", 1)[0] if arch.startswith("gfx") else None
        l2 = getattr(props, "L2_cache_size", None)
        return cls(
            index=index,
            name=str(props.name),
            vendor="amd" if gfx else "nvidia",
            compute_capability=None if gfx else f"{props.major}.{props.minor}",
            gfx_arch=gfx,
            total_memory_gib=round(props.total_memory / _GIB, 2),
            multiprocessors=int(props.multi_processor_count),
            l2_cache_mb=round(l2 / 2**20, 1) if l2 else None,
        )

    def describe(self) -> str:
        arch = f"cc {self.compute_capability}" if self.compute_capability else self.gfx_arch
        return f"{self.name!r} ({arch}, {self.total_memory_gib:.1f} GiB, {self.multiprocessors} multiprocessors)"


@dataclass(frozen=True)
class Detection:
    status: str  # matched | forced | unknown | ambiguous | no_gpu
    device: DeviceInfo | None
    spec: GpuSpec | None
    note: str

    def plan_gpu(self) -> dict[str, Any]:
        """The plan artifact's `gpu` entry (docs/artifacts.md): device name and spec key."""
        return {"name": self.device.name if self.device else None, "key": self.spec.key if self.spec else None,
                "status": self.status}

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "note": self.note,
                "device": asdict(self.device) if self.device else None,
                "spec": self.spec.key if self.spec else None}


# -- matching -------------------------------------------------------------------------------------
def _score(spec: GpuSpec, dev: DeviceInfo) -> tuple[int, int] | None:
    """(name hit, matched length) when `spec` fits `dev`, else None. Larger scores win."""
    if spec.vendor != dev.vendor:
        return None
    if spec.vendor == "nvidia" and spec.compute_capability != dev.compute_capability:
        return None
    if spec.vendor == "amd" and spec.gfx_arch != dev.gfx_arch:
        return None
    rule = spec.match
    if any(re.search(p, dev.name, re.IGNORECASE) for p in rule.exclude):
        return None
    if rule.memory_gib and not rule.memory_gib[0] <= dev.total_memory_gib <= rule.memory_gib[1]:
        return None
    if rule.multiprocessors is not None and rule.multiprocessors != dev.multiprocessors:
        return None
    hits = [m for p in rule.names if (m := re.search(p, dev.name, re.IGNORECASE))]
    if hits:
        return 1, max(len(m.group(0)) for m in hits)
    # ROCm sometimes reports a blank or generic name; the gfx arch plus memory and CU count is
    # then the only evidence, and it is enough where the constraints single out one file.
    if spec.vendor == "amd" and (rule.memory_gib or rule.multiprocessors):
        return 0, 0
    return None


def identify(props: Any, index: int = 0, specs: Mapping[str, GpuSpec] | None = None) -> Detection:
    """Match device properties (torch's, or any object with the same attribute names)."""
    dev = DeviceInfo.from_props(props, index)
    specs = all_specs() if specs is None else specs
    forced = os.environ.get(FORCE_ENV)
    if forced:
        spec = specs.get(forced) or load_spec(forced)
        return Detection(FORCED, dev, spec, f"{dev.describe()} uses spec {spec.key!r} forced by ${FORCE_ENV}")
    scored = sorted(((s, spec) for spec in specs.values() if (s := _score(spec, dev)) is not None),
                    key=lambda item: item[0], reverse=True)
    if not scored:
        return Detection(UNKNOWN, dev, None, unknown_note(dev))
    best = [spec for s, spec in scored if s == scored[0][0]]
    if len(best) > 1:
        keys = ", ".join(s.key for s in best)
        return Detection(AMBIGUOUS, dev, None,
                         f"GPU {dev.describe()} fits several spec files ({keys}); no ceilings are used. "
                         f"Set {FORCE_ENV}=<key> to pick one, or tighten their `match:` sections "
                         "(docs/gpu-specs.md)")
    spec = best[0]
    return Detection(MATCHED, dev, spec, f"GPU {dev.describe()} is {spec.name} (gpu_specs/{spec.key}.yaml)")


def unknown_note(dev: DeviceInfo) -> str:
    return (f"GPU {dev.describe()} is not in gpu_specs/, so no datasheet ceilings are used: % of ceiling and "
            "the physical-floor check are off (never guessed). Fix: add gpu_specs/<key>.yaml with its "
            "datasheet figures (docs/gpu-specs.md; `autokernel-ci gpu --calibrate` measures the real "
            f"ceilings), or set {FORCE_ENV}=<key> if it is a known GPU under another name")


NO_GPU_NOTE = ("no GPU visible to torch (torch.cuda.is_available() is False): nothing to detect. "
               "Kernels run on CPU through the Triton interpreter; their timings mean nothing and no "
               "roofline ceilings apply. Run on a machine with an NVIDIA (CUDA) or AMD (ROCm) GPU.")


def probe(device_index: int = 0) -> Detection:
    """Read the real device through torch (no warning; callers decide how to report)."""
    import torch

    if not torch.cuda.is_available():
        return Detection(NO_GPU, None, None, NO_GPU_NOTE)
    count = torch.cuda.device_count()
    if not 0 <= device_index < count:
        raise ValueError(f"device index {device_index} out of range: torch sees {count} GPU(s), "
                         f"use 0..{count - 1}")
    return identify(torch.cuda.get_device_properties(device_index), device_index)


def warn_if_unmatched(detection: Detection) -> None:
    if detection.status in (UNKNOWN, AMBIGUOUS):
        warnings.warn(detection.note, UnknownGpuWarning, stacklevel=3)


def detect(device_index: int = 0) -> GpuSpec | None:
    """The spec of GPU `device_index`; None on CPU (see probe().note) or for an unknown GPU (warns)."""
    detection = probe(device_index)
    warn_if_unmatched(detection)
    return detection.spec


def detect_props(props: Any, index: int = 0, specs: Mapping[str, GpuSpec] | None = None) -> GpuSpec | None:
    """detect() for given properties: the spec, or None with an UnknownGpuWarning."""
    detection = identify(props, index, specs)
    warn_if_unmatched(detection)
    return detection.spec
