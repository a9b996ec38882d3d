"""The GPU database: one YAML file per GPU in gpu_specs/, loaded into `GpuSpec` and validated.

Every figure is a vendor datasheet's (dense, never sparse) or, in a `measured:` section, one this
project measured. Nothing here guesses: a dtype the GPU lacks is null, and a GPU with no file is
unknown (see detect.py). docs/gpu-specs.md says how to add one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from autokernel_ci.paths import gpu_specs_dir

# Extra directory of private spec files, searched before the bundled gpu_specs/ (a file there
# with the same key replaces the bundled one: e.g. a power-capped SKU).
SPECS_DIR_ENV = "AUTOKERNEL_GPU_SPECS_DIR"

VENDORS = ("nvidia", "amd")
# Peak keys every file lists (null where the GPU lacks the type); int8 is in TOPS.
PEAK_KEYS = ("fp64", "fp64_tensor", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")
# Optional peak keys: AMD lists a matrix-core FP32 rate beside the vector one.
OPTIONAL_PEAK_KEYS = ("fp32_tensor",)
# Types every GPU in scope has: a file with these null is a typo, not a missing feature.
NON_NULL_PEAKS = ("fp32", "fp16")

_REQUIRED = {
    "key": str, "name": str, "vendor": str, "architecture": str, "match": dict,
    "boost_clock_mhz": (int, type(None)), "peak_tflops": dict, "memory_gb": (int, float),
    "memory_bandwidth_gbs": (int, float), "l2_cache_mb": (int, float, type(None)),
    "shared_memory_per_sm_kb": (int, type(None)), "tdp_w": (int, type(None)), "source": dict,
}
_VENDOR_REQUIRED = {
    "nvidia": {"compute_capability": str, "sm_count": int},
    "amd": {"gfx_arch": str, "cu_count": int},
}
_OPTIONAL = {
    "memory_type": str, "infinity_cache_mb": (int, float), "logical_devices": int,
    "measured": dict, "notes": str,
}
_MATCH_FIELDS = {"names": list, "exclude": list, "memory_gib": list, "multiprocessors": int}
_SOURCE_FIELDS = {"title": str, "url": str}
_MEASURED_FIELDS = {
    "date": str, "where": str, "copy_gbs": (int, float), "gemm_bf16_tflops": (int, float),
    "gemm_shape": list, "gemm_bf16_model_tflops": list, "multiprocessors": int,
    "l2_cache_mb": (int, float), "note": str,
}
_CC_RE = re.compile(r"^\d+\.\d+$")
_GFX_RE = re.compile(r"^gfx[0-9a-f]+$")
_FIX = "see docs/gpu-specs.md for the schema"


class SpecError(ValueError):
    """A gpu_specs file breaks the schema; the message names the file, the field and the fix."""


@dataclass(frozen=True)
class Source:
    title: str
    url: str


@dataclass(frozen=True)
class MatchRule:
    """How a device is recognised: a name regex hit (case-insensitive, searched), no exclude hit,
    and, where given, total memory within [lo, hi] GiB as torch reports it and an exact
    multiprocessor count. The constraints separate SKUs that share a name (A100 40 vs 80 GB)."""

    names: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    memory_gib: tuple[float, float] | None = None
    multiprocessors: int | None = None


@dataclass(frozen=True)
class Measured:
    """Ceilings measured on a real device of this kind (preferred over the datasheet)."""

    date: str
    where: str = ""
    copy_gbs: float | None = None  # device-to-device copy, bytes read + written
    gemm_bf16_tflops: float | None = None  # large bf16 GEMM on random data
    gemm_shape: tuple[int, ...] | None = None
    gemm_bf16_model_tflops: tuple[float, float] | None = None  # range at model shapes (informative)
    multiprocessors: int | None = None
    l2_cache_mb: float | None = None
    note: str = ""


@dataclass(frozen=True)
class GpuSpec:
    key: str
    name: str
    vendor: str
    architecture: str
    multiprocessors: int  # SMs (NVIDIA) or CUs (AMD) of the whole package
    boost_clock_mhz: int | None
    peak_tflops: Mapping[str, float | None]  # datasheet, dense, whole package
    memory_gb: float
    memory_bandwidth_gbs: float  # datasheet, whole package
    l2_cache_mb: float | None
    shared_memory_per_sm_kb: int | None
    tdp_w: int | None
    source: Source
    match: MatchRule
    compute_capability: str | None = None  # NVIDIA, e.g. "9.0"
    gfx_arch: str | None = None  # AMD, e.g. "gfx942"
    memory_type: str | None = None
    infinity_cache_mb: float | None = None
    logical_devices: int = 1  # devices torch sees per package (MI250X: 2 GCDs)
    measured: Measured | None = None
    notes: str = ""
    path: str = ""

    # -- per logical device (what one torch device gets) --------------------------------------
    @property
    def bandwidth_gbs(self) -> float:
        return self.memory_bandwidth_gbs / self.logical_devices

    def peak(self, dtype: str) -> float | None:
        """Datasheet peak TFLOP/s (TOPS for int8) for one logical device; fp64/fp32 take the faster of
        the vector and tensor/matrix units, since a roofline ceiling is the best the chip can do."""
        key = dtype_key(dtype)
        candidates = [self.peak_tflops.get(key)]
        if key in ("fp64", "fp32"):
            candidates.append(self.peak_tflops.get(f"{key}_tensor"))
        values = [v for v in candidates if v is not None]
        return max(values) / self.logical_devices if values else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- dtype names ----------------------------------------------------------------------------------
_DTYPE_ALIASES = {
    "float64": "fp64", "double": "fp64", "fp64": "fp64",
    "float32": "fp32", "float": "fp32", "fp32": "fp32",
    "tf32": "tf32",
    "float16": "fp16", "half": "fp16", "fp16": "fp16",
    "bfloat16": "bf16", "bf16": "bf16",
    "int8": "int8", "fp8": "fp8",
}


def dtype_key(dtype: Any) -> str:
    """'bf16' for torch.bfloat16, 'bfloat16' or 'bf16'; the keys of `peak_tflops`."""
    text = str(dtype).removeprefix("torch.").lower()
    if text.startswith("float8"):
        return "fp8"
    if text in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[text]
    raise ValueError(f"dtype {dtype!r} has no GPU peak: expected one of {', '.join(PEAK_KEYS)} "
                     "(or a torch floating dtype)")


# -- validation -----------------------------------------------------------------------------------
def _type_name(types: Any) -> str:
    types = types if isinstance(types, tuple) else (types,)
    if float in types:  # an integer is a number too: don't say "an integer or a number"
        types = tuple(t for t in types if t is not int)
    names = {int: "an integer", float: "a number", str: "a string", dict: "a mapping", list: "a list",
             type(None): "null"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def _check_type(where: str, name: str, value: Any, types: Any) -> None:
    allowed = types if isinstance(types, tuple) else (types,)
    # YAML reads `1979` as int; a float field accepts it. bool is an int subclass: refuse it.
    ok = isinstance(value, allowed) and not isinstance(value, bool)
    if float in allowed and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise SpecError(f"{where}: field '{name}' must be {_type_name(types)}, got {value!r}; {_FIX}")


def _check_fields(where: str, prefix: str, data: Mapping[str, Any], required: Mapping[str, Any],
                  optional: Mapping[str, Any]) -> None:
    for name, types in required.items():
        if name not in data:
            raise SpecError(f"{where}: required field '{prefix}{name}' is missing; add it ({_type_name(types)}); "
                            f"{_FIX}")
        _check_type(where, prefix + name, data[name], types)
    for name, value in data.items():
        if name in required:
            continue
        if name not in optional:
            known = ", ".join(sorted({*required, *optional}))
            raise SpecError(f"{where}: unknown field '{prefix}{name}' (a typo?); known fields: {known}")
        _check_type(where, prefix + name, value, optional[name])


def _positive(where: str, name: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise SpecError(f"{where}: field '{name}' must be positive, got {value!r}; write the datasheet figure")


def _range(where: str, name: str, value: list[Any]) -> tuple[float, float]:
    if (len(value) != 2 or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
            or not 0 <= value[0] < value[1]):
        raise SpecError(f"{where}: field '{name}' must be [low, high] numbers with 0 <= low < high, got {value!r}")
    return float(value[0]), float(value[1])


def _parse_match(where: str, data: Mapping[str, Any]) -> MatchRule:
    _check_fields(where, "match.", data, {"names": list}, {k: v for k, v in _MATCH_FIELDS.items() if k != "names"})
    patterns: dict[str, list[str]] = {"names": data["names"], "exclude": data.get("exclude", [])}
    if not patterns["names"]:
        raise SpecError(f"{where}: field 'match.names' is empty; list at least one device-name regex "
                        "(as torch.cuda.get_device_name() prints it)")
    for field_name, values in patterns.items():
        for pattern in values:
            if not isinstance(pattern, str):
                raise SpecError(f"{where}: field 'match.{field_name}' holds {pattern!r}; each entry must be a string")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise SpecError(f"{where}: field 'match.{field_name}' regex {pattern!r} does not compile ({exc}); "
                                "quote it in single quotes and escape regex characters") from exc
    memory = _range(where, "match.memory_gib", data["memory_gib"]) if "memory_gib" in data else None
    return MatchRule(tuple(patterns["names"]), tuple(patterns["exclude"]), memory, data.get("multiprocessors"))


def _parse_peaks(where: str, data: Mapping[str, Any]) -> dict[str, float | None]:
    missing = [k for k in PEAK_KEYS if k not in data]
    if missing:
        raise SpecError(f"{where}: field 'peak_tflops' lacks {', '.join(missing)}; list every one of "
                        f"{', '.join(PEAK_KEYS)} (null where the GPU lacks the type)")
    peaks: dict[str, float | None] = {}
    for name, value in data.items():
        if name not in PEAK_KEYS and name not in OPTIONAL_PEAK_KEYS:
            raise SpecError(f"{where}: unknown field 'peak_tflops.{name}'; known: "
                            f"{', '.join((*PEAK_KEYS, *OPTIONAL_PEAK_KEYS))}")
        _check_type(where, f"peak_tflops.{name}", value, (float, type(None)))
        _positive(where, f"peak_tflops.{name}", value)
        peaks[name] = None if value is None else float(value)
    for name in NON_NULL_PEAKS:
        if peaks[name] is None:
            raise SpecError(f"{where}: field 'peak_tflops.{name}' is null, but every GPU in scope has {name}; "
                            "write the dense datasheet figure")
    return peaks


def _parse_measured(where: str, data: Mapping[str, Any], datasheet_bw: float,
                    datasheet_bf16: float | None) -> Measured:
    _check_fields(where, "measured.", data, {"date": str}, {k: v for k, v in _MEASURED_FIELDS.items() if k != "date"})
    copy_gbs, gemm = data.get("copy_gbs"), data.get("gemm_bf16_tflops")
    _positive(where, "measured.copy_gbs", copy_gbs)
    _positive(where, "measured.gemm_bf16_tflops", gemm)
    # A measurement above the datasheet is a measurement bug (DESIGN.md §9), not a faster chip.
    if copy_gbs is not None and copy_gbs > datasheet_bw:
        raise SpecError(f"{where}: measured.copy_gbs {copy_gbs} exceeds the datasheet bandwidth {datasheet_bw} GB/s; "
                        "re-measure (count bytes read + written once, buffer >> L2)")
    if gemm is not None and datasheet_bf16 is not None and gemm > datasheet_bf16:
        raise SpecError(f"{where}: measured.gemm_bf16_tflops {gemm} exceeds the dense datasheet peak "
                        f"{datasheet_bf16}; re-measure on random data (zeros run faster)")
    model = _range(where, "measured.gemm_bf16_model_tflops", data["gemm_bf16_model_tflops"]) \
        if "gemm_bf16_model_tflops" in data else None
    shape = tuple(int(v) for v in data["gemm_shape"]) if "gemm_shape" in data else None
    return Measured(
        date=data["date"], where=data.get("where", ""),
        copy_gbs=None if copy_gbs is None else float(copy_gbs),
        gemm_bf16_tflops=None if gemm is None else float(gemm),
        gemm_shape=shape, gemm_bf16_model_tflops=model,
        multiprocessors=data.get("multiprocessors"), l2_cache_mb=data.get("l2_cache_mb"),
        note=data.get("note", ""),
    )


def parse_spec(data: Any, where: str = "<gpu spec>", expected_key: str | None = None) -> GpuSpec:
    """Validate one spec file's content and build the GpuSpec."""
    if not isinstance(data, dict):
        raise SpecError(f"{where}: the file must hold a YAML mapping of fields, got {type(data).__name__}; {_FIX}")
    vendor = data.get("vendor")
    if vendor not in VENDORS:
        raise SpecError(f"{where}: field 'vendor' must be one of {', '.join(VENDORS)}, got {vendor!r}")
    _check_fields(where, "", data, {**_REQUIRED, **_VENDOR_REQUIRED[vendor]}, _OPTIONAL)
    key = data["key"]
    if expected_key is not None and key != expected_key:
        raise SpecError(f"{where}: field 'key' is {key!r} but the file is named {expected_key}.yaml; "
                        "rename the file or fix the key (they must agree)")
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", key):
        raise SpecError(f"{where}: field 'key' {key!r} must be lowercase letters, digits and dashes (e.g. h100-sxm)")
    if vendor == "nvidia" and not _CC_RE.match(data["compute_capability"]):
        raise SpecError(f"{where}: field 'compute_capability' must look like \"9.0\" (quoted), "
                        f"got {data['compute_capability']!r}")
    if vendor == "amd" and not _GFX_RE.match(data["gfx_arch"]):
        raise SpecError(f"{where}: field 'gfx_arch' must look like gfx942 (no :sramecc+ suffix), "
                        f"got {data['gfx_arch']!r}")
    for name in ("memory_gb", "memory_bandwidth_gbs", "l2_cache_mb", "boost_clock_mhz", "tdp_w",
                 "shared_memory_per_sm_kb", "logical_devices"):
        _positive(where, name, data.get(name))
    _check_fields(where, "source.", data["source"], _SOURCE_FIELDS, {})
    if not data["source"]["url"].startswith("https://"):
        raise SpecError(f"{where}: field 'source.url' must be an https:// link to the datasheet, "
                        f"got {data['source']['url']!r}")
    peaks = _parse_peaks(where, data["peak_tflops"])
    measured = None
    if "measured" in data:
        measured = _parse_measured(where, data["measured"], float(data["memory_bandwidth_gbs"]), peaks.get("bf16"))
    multiprocessors = data["sm_count"] if vendor == "nvidia" else data["cu_count"]
    return GpuSpec(
        key=key, name=data["name"], vendor=vendor, architecture=data["architecture"],
        multiprocessors=multiprocessors, boost_clock_mhz=data["boost_clock_mhz"], peak_tflops=peaks,
        memory_gb=float(data["memory_gb"]), memory_bandwidth_gbs=float(data["memory_bandwidth_gbs"]),
        l2_cache_mb=data["l2_cache_mb"], shared_memory_per_sm_kb=data["shared_memory_per_sm_kb"],
        tdp_w=data["tdp_w"], source=Source(**data["source"]), match=_parse_match(where, data["match"]),
        compute_capability=data.get("compute_capability"), gfx_arch=data.get("gfx_arch"),
        memory_type=data.get("memory_type"), infinity_cache_mb=data.get("infinity_cache_mb"),
        logical_devices=data.get("logical_devices", 1), measured=measured, notes=data.get("notes", ""),
        path=where,
    )


def load_spec_file(path: str | Path) -> GpuSpec:
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise SpecError(f"{p}: not valid YAML ({exc}); fix the syntax") from exc
    return parse_spec(data, str(p), expected_key=p.stem)


# -- the database ---------------------------------------------------------------------------------
def spec_dirs() -> list[Path]:
    """Directories searched, first wins: $AUTOKERNEL_GPU_SPECS_DIR (if set), then the bundled gpu_specs/."""
    dirs = []
    extra = os.environ.get(SPECS_DIR_ENV)
    if extra:
        if not Path(extra).is_dir():
            raise SpecError(f"${SPECS_DIR_ENV}={extra!r} is not a directory; point it at a folder of "
                            "<key>.yaml files or unset it")
        dirs.append(Path(extra))
    dirs.append(gpu_specs_dir())
    return dirs


@lru_cache(maxsize=8)
def _load_dirs(dirs: tuple[Path, ...]) -> dict[str, GpuSpec]:
    specs: dict[str, GpuSpec] = {}
    for directory in dirs:
        for path in sorted(directory.glob("*.yaml")):
            if path.stem not in specs:  # an earlier directory overrides a later one
                specs[path.stem] = load_spec_file(path)
    return specs


def all_specs(dirs: Iterable[str | Path] | None = None) -> dict[str, GpuSpec]:
    """Every spec, validated, by key. Raises SpecError on the first broken file."""
    resolved = tuple(Path(d).resolve() for d in (dirs if dirs is not None else spec_dirs()))
    return dict(_load_dirs(resolved))


def load_spec(key: str, dirs: Iterable[str | Path] | None = None) -> GpuSpec:
    specs = all_specs(dirs)
    if key not in specs:
        raise KeyError(f"no GPU spec {key!r}; known: {', '.join(sorted(specs))}. "
                       "Add gpu_specs/<key>.yaml (docs/gpu-specs.md)")
    return specs[key]


def clear_cache() -> None:
    """Forget loaded files (tests and long-lived processes that edit gpu_specs/)."""
    _load_dirs.cache_clear()


__all__ = [
    "GpuSpec", "MatchRule", "Measured", "Source", "SpecError", "PEAK_KEYS", "all_specs", "clear_cache",
    "dtype_key", "load_spec", "load_spec_file", "parse_spec", "spec_dirs",
]
