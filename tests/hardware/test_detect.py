"""Detection by name, compute capability / gfx arch, memory and multiprocessor count.

torch's device-property objects cannot be built on a CPU, so `Props` is a plain dataclass with
the same attribute names: an input, not a stand-in for any of our code. Names and memory sizes
are what torch/nvidia-smi report on the real devices.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import pytest
import torch

from autokernel_ci.hardware import UnknownGpuWarning, all_specs, detect, detect_props, identify, probe
from autokernel_ci.hardware.detect import AMBIGUOUS, FORCE_ENV, FORCED, MATCHED, NO_GPU, UNKNOWN, DeviceInfo
from autokernel_ci.hardware.specs import SPECS_DIR_ENV, clear_cache

MIB = 2**20


@dataclass
class Props:
    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    gcnArchName: str = ""  # noqa: N815 - torch's attribute name
    L2_cache_size: int = 0  # noqa: N815


def nv(name: str, cc: str, mib: int, sms: int) -> Props:
    major, minor = map(int, cc.split("."))
    return Props(name, major, minor, mib * MIB, sms)


def amd(name: str, gfx: str, mib: int, cus: int) -> Props:
    return Props(name, 9, 4, mib * MIB, cus, f"{gfx}:sramecc+:xnack-")


KNOWN = [
    (nv("NVIDIA H200", "9.0", 143771, 132), "h200"),
    (nv("NVIDIA H100 80GB HBM3", "9.0", 81559, 132), "h100-sxm"),
    (nv("NVIDIA H100 PCIe", "9.0", 81559, 114), "h100-pcie"),
    (nv("NVIDIA H100 NVL", "9.0", 95830, 132), "h100-nvl"),
    (nv("NVIDIA A100-SXM4-40GB", "8.0", 40536, 108), "a100-sxm4-40gb"),
    (nv("NVIDIA A100-SXM4-80GB", "8.0", 81050, 108), "a100-sxm4-80gb"),
    (nv("NVIDIA A100-PCIE-40GB", "8.0", 40536, 108), "a100-pcie-40gb"),
    (nv("NVIDIA A100 80GB PCIe", "8.0", 81050, 108), "a100-pcie-80gb"),
    (nv("NVIDIA L40S", "8.9", 46068, 142), "l40s"),
    (nv("NVIDIA L4", "8.9", 23034, 58), "l4"),
    (nv("NVIDIA A10", "8.6", 22731, 72), "a10"),
    (nv("NVIDIA GeForce RTX 4090", "8.9", 24210, 128), "rtx-4090"),
    (nv("NVIDIA GeForce RTX 3090", "8.6", 24268, 82), "rtx-3090"),
    (nv("NVIDIA B200", "10.0", 183359, 148), "b200"),
    (amd("AMD Instinct MI300X", "gfx942", 196592, 304), "mi300x"),
    (amd("AMD Instinct MI325X", "gfx942", 262128, 304), "mi325x"),
    (amd("AMD Instinct MI350X", "gfx950", 294896, 256), "mi350x"),
    (amd("AMD Instinct MI355X", "gfx950", 294896, 256), "mi355x"),
    (amd("AMD Instinct MI250X", "gfx90a", 65520, 110), "mi250x"),
    # Same silicon, name spelled another way: the constraints decide.
    (nv("NVIDIA H100", "9.0", 81559, 114), "h100-pcie"),  # generic name, 114 SMs
    (nv("NVIDIA H100", "9.0", 81559, 132), "h100-sxm"),
    (nv("NVIDIA H100", "9.0", 95830, 132), "h100-nvl"),  # 94 GB
    (nv("NVIDIA H100 SXM5 80GB", "9.0", 81559, 132), "h100-sxm"),
    (amd("AMD Instinct MI250X/MI250", "gfx90a", 65520, 110), "mi250x"),
    # ROCm with a blank name: gfx arch + memory + CUs single out the file.
    (amd("", "gfx942", 196592, 304), "mi300x"),
    (amd("", "gfx942", 262128, 304), "mi325x"),
]

UNKNOWN_DEVICES = [
    nv("NVIDIA A10G", "8.6", 22731, 80),  # AWS SKU: different SMs and peaks
    nv("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "9.0", 9728, 16),  # a MIG slice has a fraction of the chip
    nv("NVIDIA GH200 480GB", "9.0", 97871, 132),
    nv("NVIDIA H200 NVL", "9.0", 143771, 132),
    nv("NVIDIA GeForce RTX 3090 Ti", "8.6", 24268, 84),
    nv("NVIDIA GeForce RTX 4090 D", "8.9", 24210, 114),
    nv("NVIDIA H100 PCIe", "8.0", 81559, 114),  # compute capability must agree
    nv("NVIDIA RTX 6000 Ada Generation", "8.9", 48647, 142),
    amd("AMD Instinct MI250", "gfx90a", 65520, 104),
    amd("AMD Instinct MI300A", "gfx942", 130000, 228),
    amd("AMD Radeon RX 7900 XTX", "gfx1100", 24560, 96),
]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv(FORCE_ENV, raising=False)
    monkeypatch.delenv(SPECS_DIR_ENV, raising=False)
    clear_cache()


@pytest.mark.parametrize("props,key", KNOWN, ids=[f"{p.name or '<blank>'}-{k}" for p, k in KNOWN])
def test_known_devices_match_exactly_one_spec(props, key):
    det = identify(props)
    assert det.status == MATCHED, det.note
    assert det.spec.key == key
    assert key in det.note


def test_every_spec_is_reached_by_some_device():
    assert {k for _, k in KNOWN} == set(all_specs())


@pytest.mark.parametrize("props", UNKNOWN_DEVICES, ids=[p.name for p in UNKNOWN_DEVICES])
def test_unknown_device_warns_and_has_no_peaks(props):
    with pytest.warns(UnknownGpuWarning) as record:
        spec = detect_props(props)
    assert spec is None
    msg = str(record[0].message)
    assert props.name in msg and "gpu_specs/" in msg and "docs/gpu-specs.md" in msg and FORCE_ENV in msg
    assert identify(props).status == UNKNOWN


def test_same_name_different_memory_picks_the_sku():
    a40 = identify(nv("NVIDIA A100-SXM4-80GB", "8.0", 40536, 108))  # name says 80, memory says 40
    assert a40.spec.key == "a100-sxm4-40gb"


def test_rocm_blank_name_with_twin_specs_is_ambiguous():
    props = amd("", "gfx950", 294896, 256)  # MI350X and MI355X differ only by name and clocks
    det = identify(props)
    assert det.status == AMBIGUOUS and det.spec is None
    assert "mi350x" in det.note and "mi355x" in det.note and FORCE_ENV in det.note
    with pytest.warns(UnknownGpuWarning, match="several spec files"):
        assert detect_props(props) is None


def test_gcn_arch_suffix_is_stripped():
    dev = DeviceInfo.from_props(amd("AMD Instinct MI300X", "gfx942", 196592, 304))
    assert dev.vendor == "amd" and dev.gfx_arch == "gfx942" and dev.compute_capability is None


def test_device_info_reads_l2():
    dev = DeviceInfo.from_props(Props("NVIDIA H200", 9, 0, 143771 * MIB, 132, "", 60 * MIB))
    assert dev.l2_cache_mb == 60 and dev.compute_capability == "9.0"
    assert dev.total_memory_gib == pytest.approx(140.4, abs=0.1)


def test_force_env_picks_spec_for_renamed_device(monkeypatch):
    monkeypatch.setenv(FORCE_ENV, "a10")
    det = identify(nv("NVIDIA A10G", "8.6", 22731, 80))
    assert det.status == FORCED and det.spec.key == "a10"


def test_force_env_with_unknown_key_says_which_exist(monkeypatch):
    monkeypatch.setenv(FORCE_ENV, "a10x")
    with pytest.raises(KeyError, match="a10x.*known"):
        identify(nv("NVIDIA A10G", "8.6", 22731, 80))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU path")
def test_detect_on_cpu_is_none_with_a_note():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no GPU is not a warning: it is the normal CPU case
        assert detect() is None
    det = probe()
    assert det.status == NO_GPU and det.device is None
    assert "no GPU" in det.note and "torch.cuda.is_available() is False" in det.note


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_detect_on_gpu_reads_the_real_device():
    det = probe(0)
    assert det.device is not None and det.device.name == torch.cuda.get_device_name(0)
    assert det.device.multiprocessors == torch.cuda.get_device_properties(0).multi_processor_count
    if det.status == MATCHED:
        assert detect(0) is det.spec or detect(0) == det.spec


def test_plan_gpu_entry():
    det = identify(nv("NVIDIA H200", "9.0", 143771, 132))
    assert det.plan_gpu() == {"name": "NVIDIA H200", "key": "h200", "status": MATCHED}
    unknown = identify(nv("NVIDIA A10G", "8.6", 22731, 80))
    assert unknown.plan_gpu() == {"name": "NVIDIA A10G", "key": None, "status": UNKNOWN}
