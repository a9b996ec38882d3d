"""Turn classified calls into the plan (docs/artifacts.md §1): merge, roofline, Amdahl, rank."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import torch

from autokernel_ci import hardware
from autokernel_ci.plan import Plan, PlanOp
from autokernel_ci.profiling.classify import OTHER, Call
from autokernel_ci.profiling.loading import DTYPE_NAMES
from autokernel_ci.profiling.profiler import Profile
from autokernel_ci.specs import KERNEL_TYPES, get_spec

# Used when no gpu_specs file matches (CPU, or a GPU we have no data for), so ops can still be
# ranked; the plan records it as the ceiling source. CPU: ~20 GB/s of DRAM bandwidth and
# ~0.5 TFLOP/s fp32 are a typical 2-socket-less cloud vCPU host; not a measurement of this machine.
FALLBACK_CEILINGS = {
    "cpu": {"bandwidth_gbs": 20.0, "peak_tflops": 0.5},
    "cuda": {"bandwidth_gbs": 2000.0, "peak_tflops": 300.0},  # an unknown datacenter GPU, A100-class
}
UNATTRIBUTED = "(GPU kernels outside any operator)"


@dataclass
class DeviceCeilings:
    ceilings: hardware.Ceilings
    gpu: dict[str, Any]


def device_ceilings(device: str, dtype: torch.dtype) -> DeviceCeilings:
    """The GPU's ceilings from gpu_specs (detected), else the labelled fallback for the device."""
    if device == "cuda":
        spec = hardware.detect()
        name = torch.cuda.get_device_name()
        if spec is not None:
            ceil = hardware.ceilings(spec, dtype)
            if ceil is not None:
                return DeviceCeilings(ceil, {"name": name, "key": spec.key, "ceiling_source": ceil.bandwidth_source})
    else:
        name = "cpu"
    fb = FALLBACK_CEILINGS[device]
    source = f"fallback:{device}-nominal"
    ceil = hardware.Ceilings(hardware.dtype_key(dtype), fb["bandwidth_gbs"], fb["peak_tflops"], source, source)
    return DeviceCeilings(ceil, {"name": name, "key": None, "ceiling_source": source})


def amdahl_gain(share: float, time_us: float, floor_us: float | None) -> float:
    """End-to-end speedup if this op ran at its floor: 1 / (1 - share + share * floor / time)."""
    if floor_us is None or time_us <= 0:
        return 1.0
    ratio = min(floor_us / time_us, 1.0)  # measured below the floor: no headroom (and a timing oddity)
    return 1.0 / (1.0 - share + share * ratio)


def _shape_key(shape: dict[str, Any] | None) -> str:
    return json.dumps(shape, sort_keys=True)


def build_plan(profile: Profile, calls: list[Call], *, model_ref: str, inputs_ref: str | None,
               top: int | None = None) -> Plan:
    dtype_name = DTYPE_NAMES[profile.dtype]
    dev = device_ceilings(profile.device, profile.dtype)
    groups: dict[tuple[str, str], list[Call]] = defaultdict(list)
    for c in calls:
        # Same type and shapes merge; "other" merges by operator name; a known type whose shapes
        # could not be read stays separate per label.
        key = (c.kernel_type, c.label.split(" (")[0] if c.kernel_type == OTHER else
               _shape_key(c.shape) if c.shape is not None else f"?{c.label}")
        groups[key].append(c)
    total = profile.profiled_time_us or 1.0
    ops: list[PlanOp] = []
    for (kernel_type, _), members in groups.items():
        time_us = sum(c.time_us for c in members)
        labels = [c.label for c in members]
        name = max(set(labels), key=labels.count)
        shape = members[0].shape if kernel_type != OTHER else None
        floor = None
        bound = "unknown"
        if kernel_type in KERNEL_TYPES and shape is not None:
            spec = get_spec(kernel_type)
            try:
                flops, nbytes = spec.flops(shape), spec.bytes_moved(shape, profile.dtype)
                floor = hardware.floor_us(flops, nbytes, dev.ceilings) * len(members)
                bound = hardware.bound(flops, nbytes, dev.ceilings)
            except (KeyError, ValueError, TypeError):
                floor = None
        share = time_us / total
        modules = list(dict.fromkeys(c.module for c in members))
        ops.append(PlanOp(id="", kernel_type=kernel_type, name=name, shapes=[shape] if shape else [],
                          dtype=dtype_name, calls=len(members), time_us=round(time_us, 3), share=round(share, 6),
                          bound=bound, floor_us=None if floor is None else round(floor, 3),
                          amdahl_gain=round(amdahl_gain(share, time_us, floor), 6), modules=modules))
    if profile.unattributed_us > 0:
        share = profile.unattributed_us / total
        ops.append(PlanOp(id="", kernel_type=OTHER, name=UNATTRIBUTED, shapes=[], dtype=dtype_name, calls=1,
                          time_us=round(profile.unattributed_us, 3), share=round(share, 6), bound="unknown",
                          floor_us=None, amdahl_gain=1.0))
    ops.sort(key=lambda o: o.time_us, reverse=True)
    counters: dict[str, int] = defaultdict(int)
    for op in ops:  # ids follow time order within a type: rmsnorm-0 is the costliest rmsnorm
        op.id = f"{op.kernel_type}-{counters[op.kernel_type]}"
        counters[op.kernel_type] += 1
    if top is not None:
        keep = {o.id for o in sorted(ops, key=lambda o: o.amdahl_gain, reverse=True)[:top]}
        ops = [o for o in ops if o.id in keep]
    return Plan(model=model_ref, inputs=inputs_ref, dtype=dtype_name, device=profile.device, ops=ops, gpu=dev.gpu,
                model_time_us=round(profile.model_time_us, 3), profiled_time_us=round(profile.profiled_time_us, 3))


def nine_type_share(plan: Plan) -> float:
    """Fraction of the profiled time in ops of the nine kernel types."""
    return sum(o.share for o in plan.ops if o.kernel_type != OTHER)


def _fmt_shape(kernel_type: str, shapes: list[dict[str, Any]]) -> str:
    if not shapes:
        return "-"
    try:
        return get_spec(kernel_type).describe_shape(shapes[0])
    except KeyError:
        return json.dumps(shapes[0])


def render_plan(plan: Plan, *, limit: int | None = 30) -> str:
    """The plan as a table, costliest first, with the time-sum check and the nine types' share."""
    head = (f"{'op':<20} {'time us':>10} {'share':>6} {'calls':>5} {'bound':>7} {'floor us':>9} {'amdahl':>7}  "
            f"{'shape':<34} name")
    lines = [f"model {plan.model}  dtype {plan.dtype}  device {plan.device}  gpu {plan.gpu.get('name', '?')}"
             f"  (ceilings: {plan.gpu.get('ceiling_source', '?')})", head, "-" * len(head)]
    shown = plan.ops if limit is None else plan.ops[:limit]
    for o in shown:
        floor = f"{o.floor_us:9.1f}" if o.floor_us is not None else f"{'-':>9}"
        lines.append(f"{o.id:<20} {o.time_us:10.1f} {o.share:6.1%} {o.calls:5d} {o.bound:>7} {floor} "
                     f"{o.amdahl_gain:7.3f}  {_fmt_shape(o.kernel_type, o.shapes):<34} {o.name}")
    if len(plan.ops) > len(shown):
        rest = plan.ops[len(shown):]
        lines.append(f"... {len(rest)} more ops, {sum(o.share for o in rest):.1%} of the time")
    coverage = plan.profiled_time_us / plan.model_time_us if plan.model_time_us else 0.0
    # Two times, named: the profiler inflates a small model's operators (a tiny CPU model's come to ~300% of
    # its unprofiled forward), so "profiled X of Y" read as a share of the forward misled.
    lines.append(f"operator time {plan.profiled_time_us:.1f} us under the profiler = {coverage:.0%} of the "
                 f"{plan.model_time_us:.1f} us forward measured without it; the nine kernel types cover "
                 f"{nine_type_share(plan):.1%}")
    targets = plan.targets()[:3]
    if targets:
        lines.append("top targets by Amdahl gain: " + ", ".join(f"{o.id} (x{o.amdahl_gain:.3f})" for o in targets))
    return "\n".join(lines)
