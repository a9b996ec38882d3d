"""gpu_specs/: every file loads and validates; the required GPUs are there; the figures are dense
datasheet ones; broken files fail with a message naming the file, the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autokernel_ci.hardware import PEAK_KEYS, SpecError, all_specs, load_spec
from autokernel_ci.hardware.specs import SPECS_DIR_ENV, clear_cache, dtype_key, load_spec_file
from autokernel_ci.paths import gpu_specs_dir

REQUIRED = {
    "h200", "h100-sxm", "h100-pcie", "h100-nvl", "a100-sxm4-40gb", "a100-sxm4-80gb", "a100-pcie-40gb",
    "a100-pcie-80gb", "l40s", "l4", "a10", "rtx-4090", "rtx-3090", "b200",
    "mi300x", "mi325x", "mi350x", "mi355x", "mi250x",
}
SPEC_FILES = sorted(gpu_specs_dir().glob("*.yaml"))

# Dense figures from the datasheets, spot-checked: a sparse figure copied by mistake doubles these.
DENSE_SPOT_CHECKS = [
    ("h200", "bf16", 989.5), ("h100-sxm", "fp8", 1979), ("h100-pcie", "bf16", 756.5), ("h100-nvl", "bf16", 835.5),
    ("a100-sxm4-80gb", "bf16", 312), ("a100-pcie-40gb", "tf32", 156), ("l40s", "bf16", 362), ("l4", "fp16", 121),
    ("a10", "bf16", 125), ("rtx-4090", "bf16", 165.2), ("rtx-3090", "fp16", 71), ("b200", "bf16", 2250),
    ("mi300x", "bf16", 1307.4), ("mi325x", "fp8", 2614.9), ("mi350x", "bf16", 2306.9), ("mi355x", "fp8", 5033.2),
    ("mi250x", "fp16", 383),
]
BANDWIDTH = [("h200", 4800), ("h100-sxm", 3350), ("h100-pcie", 2000), ("h100-nvl", 3900), ("a100-sxm4-40gb", 1555),
             ("a100-sxm4-80gb", 2039), ("a100-pcie-80gb", 1935), ("l40s", 864), ("l4", 300), ("a10", 600),
             ("rtx-4090", 1008), ("rtx-3090", 936), ("b200", 8000), ("mi300x", 5300), ("mi325x", 6000),
             ("mi355x", 8000), ("mi250x", 3276.8)]


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch):
    monkeypatch.delenv(SPECS_DIR_ENV, raising=False)
    clear_cache()
    yield
    clear_cache()


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.stem)
def test_every_file_loads_and_validates(path: Path):
    spec = load_spec_file(path)
    assert spec.key == path.stem
    assert set(PEAK_KEYS) <= set(spec.peak_tflops)
    assert spec.source.url.startswith("https://") and spec.source.title
    assert (spec.compute_capability is not None) == (spec.vendor == "nvidia")
    assert (spec.gfx_arch is not None) == (spec.vendor == "amd")


def test_required_gpus_present():
    missing = REQUIRED - set(all_specs())
    assert not missing, f"gpu_specs/ lacks {sorted(missing)}"


@pytest.mark.parametrize("key,dtype,dense", DENSE_SPOT_CHECKS)
def test_dense_peaks_match_datasheets(key, dtype, dense):
    assert load_spec(key).peak_tflops[dtype] == pytest.approx(dense)


@pytest.mark.parametrize("key,gbs", BANDWIDTH)
def test_bandwidth_matches_datasheets(key, gbs):
    assert load_spec(key).memory_bandwidth_gbs == pytest.approx(gbs)


@pytest.mark.parametrize("key", sorted(REQUIRED))
def test_peak_ordering_is_physical(key):
    """Narrower types never run slower than wider ones on tensor/matrix units."""
    p = load_spec(key).peak_tflops
    assert p["bf16"] >= p["fp32"]
    if p["tf32"] is not None:
        assert p["tf32"] <= p["bf16"]
    if p["fp8"] is not None:
        assert p["fp8"] >= p["bf16"]
    if p["fp64_tensor"] is not None:
        assert p["fp64_tensor"] >= p["fp64"]


def test_h200_measured_section():
    m = load_spec("h200").measured
    assert m is not None and m.date == "2026-10-28"
    assert m.copy_gbs == 4269 and m.gemm_bf16_tflops == 788
    assert m.gemm_shape == (8192, 8192, 8192)
    assert m.gemm_bf16_model_tflops == (660, 690)
    assert m.multiprocessors == 132 and m.l2_cache_mb == 60


def test_mi250x_is_two_devices_per_package():
    spec = load_spec("mi250x")
    assert spec.logical_devices == 2
    assert spec.bandwidth_gbs == pytest.approx(3276.8 / 2)
    assert spec.peak("fp64") == pytest.approx(95.7 / 2)  # matrix FP64 beats vector: the roofline takes it


def test_unknown_key_names_known_ones():
    with pytest.raises(KeyError, match="h200"):
        load_spec("h999")


@pytest.mark.parametrize("alias,key", [("torch.bfloat16", "bf16"), ("bfloat16", "bf16"), ("half", "fp16"),
                                       ("torch.float32", "fp32"), ("float64", "fp64"), ("float8_e4m3fn", "fp8"),
                                       ("tf32", "tf32"), ("int8", "int8")])
def test_dtype_aliases(alias, key):
    assert dtype_key(alias) == key


def test_dtype_key_rejects_what_has_no_peak():
    with pytest.raises(ValueError, match="int64"):
        dtype_key("int64")


# -- broken files -----------------------------------------------------------------------------
def _base() -> dict:
    return yaml.safe_load((gpu_specs_dir() / "h100-sxm.yaml").read_text())


def _write(tmp_path: Path, data: dict, key: str = "test-gpu") -> Path:
    data = {**data, "key": key}
    path = tmp_path / f"{key}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


BROKEN = [
    ("missing field", lambda d: d.pop("memory_bandwidth_gbs"), "memory_bandwidth_gbs", "missing"),
    ("unknown field", lambda d: d.update(memory_bandwith_gbs=1), "memory_bandwith_gbs", "typo"),
    ("wrong type", lambda d: d.update(memory_gb="eighty"), "memory_gb", "must be a number"),
    ("bad vendor", lambda d: d.update(vendor="intel"), "vendor", "nvidia, amd"),
    ("missing peak", lambda d: d["peak_tflops"].pop("fp8"), "peak_tflops", "null where"),
    ("null fp16", lambda d: d["peak_tflops"].update(fp16=None), "peak_tflops.fp16", "dense datasheet"),
    ("negative peak", lambda d: d["peak_tflops"].update(bf16=-1), "peak_tflops.bf16", "positive"),
    ("bad regex", lambda d: d["match"].update(names=["H100("]), "match.names", "does not compile"),
    ("empty names", lambda d: d["match"].update(names=[]), "match.names", "at least one"),
    ("bad memory range", lambda d: d["match"].update(memory_gib=[90, 80]), "match.memory_gib", "low < high"),
    ("bad cc", lambda d: d.update(compute_capability="sm90"), "compute_capability", '"9.0"'),
    ("http source", lambda d: d["source"].update(url="http://x"), "source.url", "https://"),
    ("measured above datasheet", lambda d: d["measured"].update(copy_gbs=9999), "copy_gbs", "re-measure"),
    ("gemm above datasheet", lambda d: d["measured"].update(gemm_bf16_tflops=1500), "gemm_bf16_tflops", "random"),
    ("nvidia without sm_count", lambda d: d.pop("sm_count"), "sm_count", "missing"),
]


@pytest.mark.parametrize("label,mutate,field_name,fix", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_file_names_file_field_and_fix(tmp_path, label, mutate, field_name, fix):
    data = _base()
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(SpecError) as info:
        load_spec_file(path)
    msg = str(info.value)
    assert str(path) in msg and field_name in msg and fix in msg, msg


def test_key_must_match_file_name(tmp_path):
    path = tmp_path / "other-name.yaml"
    path.write_text(yaml.safe_dump({**_base(), "key": "test-gpu"}))
    with pytest.raises(SpecError, match="other-name.yaml"):
        load_spec_file(path)


def test_invalid_yaml_is_reported(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("key: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec_file(path)


def test_amd_needs_gfx_arch(tmp_path):
    data = yaml.safe_load((gpu_specs_dir() / "mi300x.yaml").read_text())
    data["gfx_arch"] = "gfx942:sramecc+"
    with pytest.raises(SpecError, match="gfx_arch.*no :sramecc"):
        load_spec_file(_write(tmp_path, data))


def test_private_specs_dir_is_searched_first(tmp_path, monkeypatch):
    data = _base()
    data["name"] = "Power-capped H100"
    _write(tmp_path, {**data, "key": "h100-sxm"}, key="h100-sxm")
    monkeypatch.setenv(SPECS_DIR_ENV, str(tmp_path))
    clear_cache()
    specs = all_specs()
    assert specs["h100-sxm"].name == "Power-capped H100"
    assert REQUIRED <= set(specs)


def test_private_specs_dir_must_exist(tmp_path, monkeypatch):
    monkeypatch.setenv(SPECS_DIR_ENV, str(tmp_path / "nope"))
    with pytest.raises(SpecError, match=SPECS_DIR_ENV):
        all_specs()


def test_docs_table_lists_every_gpu():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "gpu-specs.md").read_text()
    missing = [key for key in all_specs() if f"| `{key}` |" not in doc]
    assert not missing, f"docs/gpu-specs.md's table lacks {missing}: add their rows"
