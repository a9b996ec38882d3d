"""GPU database, detection, calibration and the roofline (DESIGN.md §6, §9, §11).

    from autokernel_ci.hardware import detect, ceilings, roofline_floor_us
    gpu = detect()                                   # GpuSpec | None (None on CPU or an unknown GPU)
    bw, peak = ceilings(gpu, torch.bfloat16)         # GB/s, TFLOP/s: measured figures preferred
    floor, bound = roofline_floor_us(flops, nbytes, torch.bfloat16, gpu)
"""

from autokernel_ci.hardware.calibrate import Calibration, CalibrationError, calibrate
from autokernel_ci.hardware.detect import (
    Detection,
    DeviceInfo,
    UnknownGpuWarning,
    detect,
    detect_props,
    identify,
    probe,
)
from autokernel_ci.hardware.roofline import (
    COMPUTE,
    MEMORY,
    UNKNOWN,
    Ceilings,
    achieved,
    bound,
    ceiling,
    ceilings,
    floor_us,
    pct_of_ceiling,
    roofline_floor_us,
)
from autokernel_ci.hardware.specs import (
    PEAK_KEYS,
    GpuSpec,
    MatchRule,
    Measured,
    Source,
    SpecError,
    all_specs,
    dtype_key,
    load_spec,
)

__all__ = [
    "COMPUTE", "MEMORY", "PEAK_KEYS", "UNKNOWN", "Calibration", "CalibrationError", "Ceilings", "Detection",
    "DeviceInfo", "GpuSpec", "MatchRule", "Measured", "Source", "SpecError", "UnknownGpuWarning", "achieved",
    "all_specs", "bound", "calibrate", "ceiling", "ceilings", "detect", "detect_props", "dtype_key", "floor_us",
    "identify", "load_spec", "pct_of_ceiling", "probe", "roofline_floor_us",
]
