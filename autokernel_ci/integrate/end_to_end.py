"""The end-to-end check (DESIGN.md §2 step 4): plug the kernels into the model, compare its outputs
with the original's on fresh inputs, time both (eager and torch.compile), and prove from a profile
that the kernels ran inside the model.

Kernel files are untrusted, so `end_to_end()` does the work in a child process with the secrets
removed from its environment and a timeout that kills its process group; `run_end_to_end()` is
that child's body (also usable directly on kernels that are already trusted).

    python -m autokernel_ci.integrate.end_to_end REQUEST.json RESULT.json     # the worker
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

import autokernel_ci
from autokernel_ci import kernelfile
from autokernel_ci.harness.sandbox import scrubbed_env
from autokernel_ci.plan import Plan
from autokernel_ci.specs._tolerances import GEMM
from autokernel_ci.torch_profile import torch_profile

# A model's output passes through many GEMMs: the end-to-end bar is the GEMM table's relative L2
# for the dtype (bf16 1e-2), or twice the error the original model itself makes in that dtype
# against its fp32 copy, whichever is larger.
E2E_REL_L2 = {dtype: tol.rel_l2 for dtype, tol in GEMM.items()}
EAGER_ERROR_FACTOR = 2.0
FRESH_SEED = 1234
# Model-cache settings the child needs to load a Hugging Face model the way the parent does; the
# sandbox drops every HF_* name (HF_TOKEN among them), so these few are passed back by name.
MODEL_CACHE_ENV = ("HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_CACHE",
                   "TRANSFORMERS_OFFLINE")
WORKER_TIMEOUT_S = 1200.0
PASS, FAIL, ERROR = "pass", "fail", "error"


@dataclass
class Engagement:
    op_id: str
    kernel_type: str
    op_name: str
    calls_eager: int  # profiler events of autokernel::<op> in one patched eager forward
    calls_compiled: int | None = None  # the same in the compiled patched model
    gpu_kernels: list[str] = field(default_factory=list)  # device kernels those events launched
    own_kernels: list[str] = field(default_factory=list)  # the kernel file's own jit/CUDA kernels

    @property
    def engaged(self) -> bool:
        if self.calls_eager <= 0:
            return False
        if self.gpu_kernels and self.own_kernels:  # GPU: one of our kernels must be what ran
            return any(kernelfile.own_kernel_event(k, self.own_kernels) for k in self.gpu_kernels)
        return True


@dataclass
class EndToEndResult:
    model: str
    inputs: str | None
    dtype: str
    device: str
    status: str = ERROR  # pass | fail | error
    reason: str = ""
    kernels: dict[str, str] = field(default_factory=dict)
    applied: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    correct: bool = False
    rel_l2: float | None = None  # patched vs original model, same dtype
    max_abs_err: float | None = None
    rel_l2_vs_fp32: float | None = None  # patched vs the fp32 copy of the original
    eager_rel_l2_vs_fp32: float | None = None  # the original's own error in this dtype
    tolerance_rel_l2: float | None = None
    eager_us: float | None = None
    patched_us: float | None = None
    compile_us: float | None = None
    patched_compile_us: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None  # compiled patched vs compiled original
    compile_backend: str | None = None
    compile_fullgraph: bool | None = None
    compile_note: str = ""
    engagement: list[Engagement] = field(default_factory=list)
    gpu: str = ""
    duration_s: float = 0.0

    @property
    def engaged(self) -> bool:
        return bool(self.engagement) and all(e.engaged for e in self.engagement)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EndToEndResult:
        return cls(**{**d, "engagement": [Engagement(**e) for e in d.get("engagement", [])]})


# -- helpers -------------------------------------------------------------------------------------------
def output_tensors(out: Any) -> list[torch.Tensor]:
    """The floating tensors of a model output (tensor, tuple/list, dict or Hugging Face ModelOutput)."""
    if isinstance(out, torch.Tensor):
        return [out] if out.is_floating_point() else []
    if isinstance(out, Mapping):
        return [t for v in out.values() for t in output_tensors(v)]
    if isinstance(out, list | tuple):
        return [t for v in out for t in output_tensors(v)]
    return []


def rel_l2(got: list[torch.Tensor], want: list[torch.Tensor]) -> tuple[float, float]:
    """(relative L2 error over all outputs, max abs error), accumulated in fp32 per tensor."""
    if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want, strict=True)):
        raise ValueError(f"output structure differs: {[tuple(g.shape) for g in got]} "
                         f"vs {[tuple(w.shape) for w in want]}")
    err2 = ref2 = 0.0
    max_abs = 0.0
    for g, w in zip(got, want, strict=True):
        d = g.float() - w.float()
        err2 += float(d.square().sum())
        ref2 += float(w.float().square().sum())
        max_abs = max(max_abs, float(d.abs().max()) if d.numel() else 0.0)
    return (err2 ** 0.5) / (ref2 ** 0.5 if ref2 > 0 else 1.0), max_abs


def fresh_inputs(inputs: Any, seed: int = FRESH_SEED) -> Any:
    """New values of the same kind: floats with the same mean/std, ids redrawn in the same range
    (negative ids such as ignore_index=-100 stay where they are)."""
    gen = torch.Generator().manual_seed(seed)

    def fresh(v: Any) -> Any:
        if not isinstance(v, torch.Tensor) or v.numel() == 0:
            return v
        if v.is_floating_point():
            x = torch.randn(v.shape, generator=gen).to(v.device)
            return (x * float(v.float().std().nan_to_num(1.0)) + float(v.float().mean())).to(v.dtype)
        if v.dtype == torch.bool:
            return v
        hi = int(v.max()) + 1
        if hi <= 0:
            return v
        new = torch.randint(0, hi, v.shape, generator=gen).to(device=v.device, dtype=v.dtype)
        return torch.where(v < 0, v, new)

    if isinstance(inputs, dict):
        return {k: fresh(v) for k, v in inputs.items()}
    return tuple(fresh(v) for v in inputs)


def _count_ops(fn: Any, device: str, names: set[str]) -> tuple[dict[str, int], dict[str, list[str]]]:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.no_grad(), torch_profile(activities) as prof:
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
    counts = dict.fromkeys(names, 0)
    kernels: dict[str, list[str]] = {n: [] for n in names}
    for evt in prof.events():
        if evt.name in counts:
            counts[evt.name] += 1
            kernels[evt.name].extend(k.name for k in evt.kernels)
            for child in evt.cpu_children:  # the op's impl may run under a nested dispatcher event
                kernels[evt.name].extend(k.name for k in child.kernels)
    return counts, {n: sorted(set(v)) for n, v in kernels.items()}


def _compile(model: torch.nn.Module, backend: str) -> tuple[Any, bool]:
    """(compiled model, fullgraph?) — fullgraph first; a model with a graph break compiles without."""
    return torch.compile(model, backend=backend, fullgraph=True), True


# -- the check, in this process --------------------------------------------------------------------------
def run_end_to_end(model_ref: str, inputs_ref: str | None, plan: Plan, kernels: Mapping[str, str | Path], *,
                   dtype: str, device: str, compile: bool = True, compile_backend: str = "inductor") -> EndToEndResult:
    from autokernel_ci.integrate.custom_ops import register_kernels
    from autokernel_ci.integrate.patching import patch_model
    from autokernel_ci.profiling.loading import DTYPES, ForwardError, build_inputs, build_model, call_model, run_forward
    from autokernel_ci.profiling.profiler import measure_us

    start = time.perf_counter()
    res = EndToEndResult(model_ref, inputs_ref, dtype, device, kernels={k: str(v) for k, v in kernels.items()})
    res.gpu = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    torch_dtype = DTYPES[dtype]
    ops = register_kernels(kernels)
    model = build_model(model_ref, dtype=torch_dtype, device=device)
    inputs = fresh_inputs(build_inputs(model_ref, inputs_ref, dtype=torch_dtype, device=device))
    patched = patch_model(model, plan, ops)
    report = patched.autokernel_patches
    res.applied = [asdict(r) for r in report.applied]
    res.skipped = [asdict(r) for r in report.skipped]

    want = output_tensors(run_forward(model, inputs))
    try:
        got = output_tensors(run_forward(patched, inputs))
    except ForwardError as exc:
        res.status = FAIL
        res.reason = f"the patched model's forward failed (a plugged-in kernel raised): {exc.__cause__}"
        res.duration_s = time.perf_counter() - start
        return res
    res.rel_l2, res.max_abs_err = rel_l2(got, want)
    tol = E2E_REL_L2[torch_dtype]
    if torch_dtype != torch.float32:
        ref_model = copy.deepcopy(model).float()
        ref_inputs = {k: _to32(v) for k, v in inputs.items()} if isinstance(inputs, dict) else \
            tuple(_to32(v) for v in inputs)
        ref = output_tensors(run_forward(ref_model, ref_inputs))
        del ref_model
        res.rel_l2_vs_fp32, _ = rel_l2(got, ref)
        res.eager_rel_l2_vs_fp32, _ = rel_l2(want, ref)
        tol = max(tol, EAGER_ERROR_FACTOR * res.eager_rel_l2_vs_fp32)
        res.correct = res.rel_l2_vs_fp32 <= tol
    else:
        res.correct = res.rel_l2 <= tol
    res.tolerance_rel_l2 = tol

    names = {f"autokernel::{ops[r.op_id].op_name}" for r in report.applied}
    counts, launched = _count_ops(lambda: call_model(patched, inputs), device, names)
    res.engagement = [Engagement(op_id, kop.kernel_type, kop.op_name, counts.get(f"autokernel::{kop.op_name}", 0),
                                 gpu_kernels=launched.get(f"autokernel::{kop.op_name}", []),
                                 own_kernels=list(kop.kernel_names))
                      for op_id, kop in ops.items() if op_id in report.op_ids]

    with torch.no_grad():
        res.eager_us = measure_us(lambda: call_model(model, inputs), device)
        res.patched_us = measure_us(lambda: call_model(patched, inputs), device)
        if compile:
            res.compile_backend = compile_backend
            try:
                compiled, res.compile_fullgraph = _compile(model, compile_backend)
                compiled_patched, _ = _compile(patched, compile_backend)
                call_model(compiled, inputs)
                out_cp = output_tensors(call_model(compiled_patched, inputs))
                cp_err, _ = rel_l2(out_cp, got)
                res.compile_note = f"compiled patched vs eager patched: rel_l2 {cp_err:.2e}"
                res.compile_us = measure_us(lambda: call_model(compiled, inputs), device)
                res.patched_compile_us = measure_us(lambda: call_model(compiled_patched, inputs), device)
                c_counts, _ = _count_ops(lambda: call_model(compiled_patched, inputs), device, names)
                for e in res.engagement:
                    e.calls_compiled = c_counts.get(f"autokernel::{e.op_name}", 0)
            except Exception as exc:  # a compile failure is a finding, not a crash of the check
                res.compile_note = f"torch.compile failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    if res.eager_us and res.patched_us:
        res.speedup_vs_eager = res.eager_us / res.patched_us
    if res.compile_us and res.patched_compile_us:
        res.speedup_vs_compile = res.compile_us / res.patched_compile_us
    problems = []
    if not res.correct:
        err = res.rel_l2_vs_fp32 if res.rel_l2_vs_fp32 is not None else res.rel_l2
        problems.append(f"outputs differ: rel_l2 {err:.3g} > {tol:.3g}")
    if not res.engaged:
        idle = [e.op_id for e in res.engagement if not e.engaged] or ["(no op was patched)"]
        problems.append(f"kernels not seen running inside the model: {', '.join(idle)}")
    res.status = FAIL if problems else PASS
    res.reason = "; ".join(problems)
    res.duration_s = time.perf_counter() - start
    return res


def _to32(v: Any) -> Any:
    return v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v


# -- the sandboxed entry point -------------------------------------------------------------------------------
def worker_env(parent: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: the harness sandbox's allowlist with secrets dropped (harness/sandbox.py),
    this package first on PYTHONPATH (so `-m autokernel_ci...` imports the same code from any cwd),
    and the model-cache settings above."""
    parent = os.environ if parent is None else parent
    root = str(Path(autokernel_ci.__file__).resolve().parents[1])
    paths = [root] + [p for p in parent.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    extra = {name: parent[name] for name in MODEL_CACHE_ENV if name in parent}
    return scrubbed_env(parent, extra={**extra, "PYTHONPATH": os.pathsep.join(paths)})


def end_to_end(model_ref: str, inputs_ref: str | None, plan: Plan, kernels: Mapping[str, str | Path], *,
               dtype: str, device: str, compile: bool = True, compile_backend: str = "inductor",
               timeout_s: float = WORKER_TIMEOUT_S) -> EndToEndResult:
    """Run the end-to-end check in a child process (secrets scrubbed, killed after timeout_s)."""
    request = {"model": model_ref, "inputs": inputs_ref, "plan": plan.to_dict(),
               "kernels": {k: str(Path(v).resolve()) for k, v in kernels.items()}, "dtype": dtype, "device": device,
               "compile": compile, "compile_backend": compile_backend}
    with tempfile.TemporaryDirectory(prefix="autokernel-e2e-") as tmp:
        req, out = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(json.dumps(request))
        proc = subprocess.Popen([sys.executable, "-m", "autokernel_ci.integrate.end_to_end", str(req), str(out)],
                                env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, text=True)
        try:
            log, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return EndToEndResult(model_ref, inputs_ref, dtype, device, status=ERROR,
                                  reason=f"timed out after {timeout_s:.0f} s; raise timeout_s or use a smaller size")
        if out.is_file():
            return EndToEndResult.from_dict(json.loads(out.read_text()))
        tail = "\n".join(log.strip().splitlines()[-15:])
        return EndToEndResult(model_ref, inputs_ref, dtype, device, status=ERROR,
                              reason=f"end-to-end worker exited with {proc.returncode} and no result:\n{tail}")


def _worker(request_path: str, result_path: str) -> int:
    req = json.loads(Path(request_path).read_text())
    try:
        res = run_end_to_end(req["model"], req["inputs"], Plan.from_dict(req["plan"]), req["kernels"],
                             dtype=req["dtype"], device=req["device"], compile=req["compile"],
                             compile_backend=req["compile_backend"])
    except torch.OutOfMemoryError as exc:
        res = EndToEndResult(req["model"], req["inputs"], req["dtype"], req["device"], status=ERROR,
                             reason=f"GPU out of memory ({str(exc).splitlines()[0]}); use a smaller size or batch")
    except Exception as exc:
        res = EndToEndResult(req["model"], req["inputs"], req["dtype"], req["device"], status=ERROR,
                             reason=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}")
    Path(result_path).write_text(json.dumps(res.to_dict(), indent=2) + "\n")
    return 0


# -- the one renderer ---------------------------------------------------------------------------------------
def _us(v: float | None) -> str:
    return f"{v:,.1f} us" if v is not None else "-"


def _x(v: float | None) -> str:
    return f"x{v:.3f}" if v is not None else "-"


def render_end_to_end(res: EndToEndResult, *, markdown: bool = False) -> str:
    """The result as text (or a markdown section): verdict, correctness, timings, engagement, skips."""
    err = res.rel_l2_vs_fp32 if res.rel_l2_vs_fp32 is not None else res.rel_l2
    own = "-" if res.eager_rel_l2_vs_fp32 is None else f"{res.eager_rel_l2_vs_fp32:.3g}"
    lines = [
        f"{'## ' if markdown else ''}End-to-end check: {res.status.upper()}"
        + (f" ({res.reason})" if res.reason else ""),
        "",
        f"model {res.model}  dtype {res.dtype}  device {res.device} ({res.gpu})",
        f"correctness: rel_l2 {'-' if err is None else f'{err:.3g}'} (tolerance {res.tolerance_rel_l2 or 0:.3g}; "
        f"original model in {res.dtype} vs fp32: {own}"
        f"; patched vs original max |diff| {'-' if res.max_abs_err is None else f'{res.max_abs_err:.3g}'})",
        "",
    ]
    rows = [("original, eager", res.eager_us, None), ("patched, eager", res.patched_us, res.speedup_vs_eager),
            (f"original, torch.compile ({res.compile_backend or 'not run'})", res.compile_us, None),
            ("patched, torch.compile", res.patched_compile_us, res.speedup_vs_compile)]
    if markdown:
        lines += ["| forward pass | time | speedup |", "|---|---:|---:|"]
        lines += [f"| {n} | {_us(t)} | {_x(s)} |" for n, t, s in rows]
    else:
        lines += [f"  {n:<44} {_us(t):>16} {_x(s):>8}" for n, t, s in rows]
    if res.compile_note:
        lines.append(f"  {res.compile_note}")
    lines += ["", "kernels seen running inside the model (profiler):"]
    for e in res.engagement:
        gpu = f", GPU kernels: {', '.join(e.gpu_kernels[:3])}" if e.gpu_kernels else ""
        compiled = f", compiled: {e.calls_compiled}" if e.calls_compiled is not None else ""
        lines.append(f"  {'ok ' if e.engaged else 'NO '} {e.op_id:<22} autokernel::{e.op_name} calls: {e.calls_eager}"
                     f"{compiled}{gpu}")
    if res.skipped:
        lines += ["", "not plugged in:"]
        lines += [f"  {s['op_id']} at {s['module'] or '(model)'}: {s['reason']}" for s in res.skipped]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python -m autokernel_ci.integrate.end_to_end REQUEST.json RESULT.json", file=sys.stderr)
        sys.exit(2)
    sys.exit(_worker(sys.argv[1], sys.argv[2]))
