"""Classify profiled events into the nine kernel types (or "other"), with shapes in spec keys.

Module structure decides first, because models write many kernels out of small aten ops: a LLaMA
RMSNorm is pow/mean/add/rsqrt/mul inside one module, a SwiGLU MLP is three linears and silu*mul,
RoPE is slices/mul/sub/cat, attention may be matmul/softmax/matmul. Then the outermost aten
operator of each event (aten::linear over aten::addmm, SDPA over its flash kernel), then GPU kernel
names (Hopper cuBLAS: nvjet, sm90_xmma, cutlass).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from autokernel_ci.profiling.profiler import OpEvent, Profile

OTHER = "other"
SDPA_OPS = {"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
            "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
            "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_flash_attention_forward",
            "aten::_efficient_attention_forward"}
ROOT_TYPES = {
    "aten::cross_entropy_loss": "cross_entropy",
    "aten::layer_norm": "layernorm", "aten::native_layer_norm": "layernorm",
    "aten::rms_norm": "rmsnorm", "aten::_fused_rms_norm": "rmsnorm",
    "aten::linear": "matmul", "aten::addmm": "matmul", "aten::mm": "matmul",
    "aten::softmax": "softmax", "aten::_softmax": "softmax", "aten::special_softmax": "softmax",
    "aten::sum": "reduce",
    **{name: "flash_attention" for name in SDPA_OPS},
}
BATCHED_MATMUL = {"aten::matmul", "aten::bmm", "aten::baddbmm"}
MASK_OPS = {"aten::masked_fill", "aten::masked_fill_", "aten::tril", "aten::triu", "aten::where"}
# Ops RoPE is written with (x1*cos - x2*sin, x2*cos + x1*sin, or rotate_half's neg + cat).
ROTARY_OPS = {"aten::mul", "aten::add", "aten::sub", "aten::neg", "aten::slice", "aten::narrow",
              "aten::chunk", "aten::split", "aten::unsqueeze", "aten::select", "aten::to", "aten::_to_copy"}
WRITTEN_ATTENTION = "attention written out"  # label prefix; the plug-back cannot redirect these
MATMUL_KERNEL = re.compile(r"nvjet|sm\d+_xmma|cutlass|gemm|cublas", re.IGNORECASE)


@dataclass
class Call:
    """One call of one op: the events of one module call, one operator call or one RoPE cat."""

    kernel_type: str
    label: str
    shape: dict[str, Any] | None
    module: str  # where the plug-back patches it: the module path ("" = the model itself)
    module_cls: str
    time_us: float = 0.0
    events: list[int] = field(default_factory=list)


def _linear_children(m: nn.Module) -> list[tuple[str, nn.Linear]]:
    return [(n, c) for n, c in m.named_children() if isinstance(c, nn.Linear)]


def swiglu_parts(m: nn.Module) -> tuple[nn.Linear, nn.Linear, nn.Linear] | None:
    """(gate, up, down) when `m` is a SwiGLU MLP: three bias-free linears D->F, D->F, F->D."""
    lins = _linear_children(m)
    if len(lins) != 3 or any(lin.bias is not None for _, lin in lins):
        return None
    d_model = lins[0][1].in_features
    ups = [(n, lin) for n, lin in lins if lin.out_features != d_model or n.endswith(("gate_proj", "up_proj"))]
    down = [(n, lin) for n, lin in lins if (n, lin) not in ups]
    if len(ups) != 2 or len(down) != 1:
        return None
    d, f = down[0][1].out_features, down[0][1].in_features
    if any((lin.in_features, lin.out_features) != (d, f) for _, lin in ups):
        return None
    # LLaMA names: gate_proj/up_proj, or Meta's w1 (gate) / w3 (up); else the first declared is the gate.
    ups.sort(key=lambda p: (0 if "gate" in p[0] or p[0] == "w1" else 1 if "up" in p[0] or p[0] == "w3" else 2))
    return ups[0][1], ups[1][1], down[0][1]


def norm_role(m: nn.Module) -> str | None:
    if isinstance(m, nn.LayerNorm):
        return "layernorm"
    if isinstance(m, getattr(nn, "RMSNorm", ())):
        return "rmsnorm"
    params = dict(m.named_parameters(recurse=False))
    is_leaf = not any(True for _ in m.children())
    if "rmsnorm" in type(m).__name__.lower() or (
        is_leaf and set(params) == {"weight"} and params["weight"].dim() == 1
        and any(hasattr(m, a) for a in ("eps", "variance_epsilon"))
    ):
        return "rmsnorm"
    return None


def norm_eps(m: nn.Module, default: float) -> float:
    for attr in ("eps", "variance_epsilon"):
        value = getattr(m, attr, None)
        if isinstance(value, float | int):
            return float(value)
    return default


def _prod(dims: list[int]) -> int:
    return math.prod(int(d) for d in dims)


def _rows(shape: list[int] | None) -> dict[str, int] | None:
    if not shape:
        return None
    return {"M": _prod(shape[:-1]), "N": int(shape[-1])}


def _matmul_shape(name: str, shapes: list[Any]) -> dict[str, int] | None:
    try:
        if name == "aten::linear":
            x, w = shapes[0], shapes[1]
            return {"M": _prod(x[:-1]), "K": int(x[-1]), "N": int(w[0])}
        if name == "aten::addmm":
            a, b = shapes[1], shapes[2]
        else:
            a, b = shapes[0], shapes[1]
        if len(b) != 2:
            return None
        return {"M": _prod(a[:-1]), "K": int(a[-1]), "N": int(b[1])}
    except (IndexError, TypeError):
        return None


def _sdpa_shape(shapes: list[Any], concrete: list[Any]) -> dict[str, Any] | None:
    if len(shapes) < 3 or len(shapes[0]) != 4 or len(shapes[1]) != 4:
        return None
    b, h, s, d = shapes[0]
    is_causal = bool(concrete[5]) if len(concrete) > 5 and concrete[5] is not None else False
    has_mask = len(shapes) > 3 and bool(shapes[3])
    # A mask argument is taken as causal: decoders pass their causal mask this way.
    return {"B": b, "H": h, "Hkv": shapes[1][1], "S": s, "D": d, "causal": is_causal or has_mask}


class Classifier:
    def __init__(self, profile: Profile):
        self.p = profile
        self.direct: dict[int, list[OpEvent]] = defaultdict(list)  # module call -> its own events
        for e in profile.events:
            if e.module_calls:
                self.direct[e.module_calls[0]].append(e)
        self.roles = {i: self._role(i) for i in range(len(profile.module_calls))}
        self.rotary: dict[int, int] = {}  # operator key -> key of the aten::cat that closes its RoPE
        for evs in self.direct.values():
            self._find_rotary(evs)

    # -- module roles ---------------------------------------------------------------------------
    def module(self, call_index: int) -> nn.Module | None:
        return self.p.modules.get(self.p.module_calls[call_index].path)

    def _all_events(self, call_index: int) -> list[OpEvent]:
        return [e for e in self.p.events if call_index in e.module_calls]

    def _role(self, i: int) -> str | None:
        m = self.module(i)
        if m is None:
            return None
        role = norm_role(m)
        if role:
            return role
        if swiglu_parts(m) is not None and any(e.chain[0].name == "aten::silu" for e in self._all_events(i)):
            return "fused_mlp"
        roots = {e.chain[0].name for e in self.direct.get(i, [])}
        if roots & SDPA_OPS:
            return "sdpa_attention"
        core = [e for e in self.direct.get(i, []) if e.chain[0].name in BATCHED_MATMUL]
        if roots & {"aten::softmax", "aten::_softmax"} and len({e.chain[0].key for e in core}) >= 2:
            return "written_attention"
        return None

    def _find_rotary(self, evs: list[OpEvent]) -> None:
        """Each aten::cat closing a run of RoPE-style elementwise ops on 4-D halves is one RoPE call."""
        roots = [e for e in evs if len(e.chain) == 1]  # operators called by the module itself
        for i, e in enumerate(roots):
            if e.chain[0].name != "aten::cat":
                continue
            run = []
            for prev in reversed(roots[:i]):
                if prev.chain[0].name not in ROTARY_OPS:
                    break
                run.append(prev)
            four_d = [s for r in run for s in r.chain[0].shapes if isinstance(s, list) and len(s) == 4]
            has_arith = {r.chain[0].name for r in run} & {"aten::mul", "aten::neg", "aten::sub"}
            if four_d and has_arith and len(run) >= 3:
                for r in [*run, e]:
                    self.rotary.setdefault(r.chain[0].key, e.chain[0].key)

    # -- classification --------------------------------------------------------------------------
    def classify(self) -> list[Call]:
        calls: dict[tuple[Any, ...], Call] = {}
        for e in self.p.events:
            kernel_type, key, shape, module_index = self._classify(e)
            mc = self.p.module_calls[module_index] if module_index is not None else None
            call = calls.get(key)
            if call is None:
                label = self._label(kernel_type, e, mc)
                call = calls[key] = Call(kernel_type, label, shape, mc.path if mc else "", mc.cls if mc else "")
            elif call.shape is None and shape is not None:
                call.shape = shape
            call.time_us += e.time_us
            call.events.append(e.seq)
        return list(calls.values())

    def _label(self, kernel_type: str, e: OpEvent, mc: Any) -> str:
        where = f" ({mc.cls})" if mc else ""
        if kernel_type == "rotary_embedding":
            return f"RoPE: slices/mul/cat{where}"
        if kernel_type in ("rmsnorm", "layernorm", "fused_mlp") and mc and self.roles.get(mc.index) == kernel_type:
            return f"{mc.cls} module"
        if kernel_type == "flash_attention" and mc and self.roles.get(mc.index) == "written_attention":
            return f"{WRITTEN_ATTENTION}: matmul/softmax/matmul{where}"
        return f"{e.chain[0].name}{where}"

    def _classify(self, e: OpEvent) -> tuple[str, tuple[Any, ...], dict[str, Any] | None, int | None]:
        calls = e.module_calls
        inner = calls[0] if calls else None
        for i in reversed(calls):  # outermost SwiGLU MLP claims its linears too
            if self.roles[i] == "fused_mlp":
                return "fused_mlp", ("module", i), self._mlp_shape(i), i
        if inner is not None and self.roles[inner] in ("rmsnorm", "layernorm"):
            mc = self.p.module_calls[inner]
            return self.roles[inner], ("module", inner), _rows(mc.arg_shapes[0] if mc.arg_shapes else None), inner
        rope = self.rotary.get(e.chain[0].key)
        if rope is not None:
            return "rotary_embedding", ("rope", rope), self._rotary_shape(rope), inner
        root = e.chain[0]
        kernel_type = ROOT_TYPES.get(root.name)
        written = inner is not None and self.roles[inner] == "written_attention"
        if written and (root.name in BATCHED_MATMUL or kernel_type == "softmax" or root.name in MASK_OPS
                        or root.name in ("aten::div", "aten::mul")):
            return "flash_attention", ("module", inner), self._written_attention_shape(inner), inner
        if kernel_type == "flash_attention":
            return kernel_type, ("op", root.key), _sdpa_shape(root.shapes, root.concrete), inner
        if kernel_type == "matmul" or (root.name in BATCHED_MATMUL and _matmul_shape(root.name, root.shapes)):
            return "matmul", ("op", root.key), _matmul_shape(root.name, root.shapes), inner
        if kernel_type in ("softmax", "reduce"):
            dims = root.concrete[1] if len(root.concrete) > 1 else None
            last = root.shapes[0] and (dims in (None, -1, [-1]) or dims == [len(root.shapes[0]) - 1]
                                       or dims == len(root.shapes[0]) - 1)
            if last:
                return kernel_type, ("op", root.key), _rows(root.shapes[0]), inner
        elif kernel_type is not None:
            shape = {"M": root.shapes[0][0], "V": root.shapes[0][1]} if kernel_type == "cross_entropy" \
                and len(root.shapes[0]) == 2 else _rows(root.shapes[0]) if kernel_type != "cross_entropy" else None
            return kernel_type, ("op", root.key), shape, inner
        if any(MATMUL_KERNEL.search(k) for k in e.kernels):
            return "matmul", ("op", root.key), _matmul_shape(root.name, root.shapes), inner
        return OTHER, ("other", root.name), None, inner

    # -- shapes in spec keys -------------------------------------------------------------------------
    def _mlp_shape(self, i: int) -> dict[str, Any] | None:
        parts = swiglu_parts(self.module(i))  # type: ignore[arg-type]
        x = self.p.module_calls[i].arg_shapes[0] if self.p.module_calls[i].arg_shapes else None
        if parts is None or not x:
            return None
        return {"M": _prod(x[:-1]), "D": int(x[-1]), "F": parts[0].out_features}

    def _rotary_shape(self, cat_key: int) -> dict[str, Any] | None:
        members = {k for k, cat in self.rotary.items() if cat == cat_key}
        halves = [shp for e in self.p.events if len(e.chain) == 1 and e.chain[0].key in members
                  for shp in e.chain[0].shapes if isinstance(shp, list) and len(shp) == 4]
        if not halves:
            return None
        b, h, seq, half = min(halves, key=lambda shp: shp[-1])  # x1/x2 are the halves of x[..., D]
        return {"B": b, "H": h, "S": seq, "D": 2 * half}

    def _written_attention_shape(self, i: int) -> dict[str, Any] | None:
        evs = self.direct[i]
        causal = any(e.chain[0].name in MASK_OPS for e in evs)
        for e in evs:
            shapes = e.chain[0].shapes
            if e.chain[0].name in BATCHED_MATMUL and shapes and isinstance(shapes[0], list) and len(shapes[0]) == 4:
                b, h, s, d = shapes[0]
                return {"B": b, "H": h, "Hkv": h, "S": s, "D": d, "causal": causal}
        return None


def classify(profile: Profile) -> list[Call]:
    return Classifier(profile).classify()
