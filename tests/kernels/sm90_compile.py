"""What a Triton starter's launches cost on an sm_90 GPU (H100 / H200), found on a machine without one.

The CPU interpreter has no shared memory and no register file, so a launch too big for the GPU passes every CPU
test and fails only there (a GPU run asked the matmul for a 256 x 256 fp32 tile: 262,144 B of shared memory
against 232,448). `capture` runs a starter under the interpreter with its named kernels spied on and keeps each
launch's arguments; `compile_sm90` hands them to Triton's own compiler for sm_90 (ahead of time, no GPU) and
returns the shared bytes it allots, and the registers and stack (spills) of the cubin it builds.

Each launch is compiled as the runtime would on a GPU, at its least favourable: 16-byte aligned pointers (torch's
allocations), integers equal to 1 as constants (Triton specialises them), nothing known of the other integers (a
size or row stride not a multiple of 16, as in the spec's odd shapes). The compile runs in a subprocess without
TRITON_INTERPRET: under the interpreter @triton.jit (triton.language's own helpers too) makes functions only the
interpreter can run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

import torch
from starter_run import run_spied, starter_module

SM90_SHARED_OPTIN = 232448  # bytes a block may opt in to on an H100 / H200 (227 KB)
_TRITON_TYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.int64: "i64",
                 torch.int32: "i32", torch.uint8: "u8", torch.bool: "i1"}

# Reads [kernel file, [[kernel name, [arg, ...], {meta}], ...]] from stdin, prints one
# {"shared": ..., "registers": ..., "stack": ...} per launch as a JSON list.
_COMPILE = r"""
import importlib.util, json, os, re, subprocess, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

path, launches = json.load(sys.stdin)
spec = importlib.util.spec_from_file_location("starter_sm90", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
# Triton ships cuobjdump beside its ptxas: the registers and stack (spills) of a cubin without a GPU to load it on.
cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
out = []
for name, args, meta in launches:
    kernel = getattr(module, name)
    names = list(kernel.arg_names)
    options = {k: meta.pop(k) for k in ("num_warps", "num_stages") if k in meta}
    signature, constants, aligned = {}, dict(meta), []
    for arg_name, (kind, value) in zip(names, args):
        if kind == "const":
            constants[arg_name] = value
        elif kind == "ptr":
            signature[arg_name] = "*" + value
            aligned.append(arg_name)
        else:
            signature[arg_name] = kind
    signature.update({k: "constexpr" for k in constants})
    source = ASTSource(fn=kernel, signature={k: signature[k] for k in names if k in signature},
                       constexprs={(names.index(k),): v for k, v in constants.items()},
                       attrs={(names.index(k),): [["tt.divisibility", 16]] for k in aligned})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        with open(cubin, "wb") as f:
            f.write(compiled.asm["cubin"])
        usage = subprocess.run([cuobjdump, "--dump-resource-usage", cubin], capture_output=True, text=True,
                               check=True).stdout
    fields = dict(re.findall(r"(REG|STACK):(\d+)", usage))
    out.append({"shared": compiled.metadata.shared, "registers": int(fields["REG"]), "stack": int(fields["STACK"])})
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Launch:
    """One launch of a jit kernel: its name, positional arguments as the compiler sees them, keyword arguments."""

    kernel: str
    args: tuple[tuple[str, object], ...]  # ("ptr", "fp32"), ("const", 1), ("i32", None), ("fp32", None), ...
    meta: dict

    def with_meta(self, **changes: object) -> Launch:
        return Launch(self.kernel, self.args, {**self.meta, **changes})


@dataclass(frozen=True)
class Cost:
    shared: int  # bytes of shared memory a block
    registers: int  # registers a thread
    stack: int  # bytes of stack frame a thread: spills (the starters call no functions)


def _describe(value: object) -> tuple[str, object]:
    if isinstance(value, torch.Tensor):
        return ("ptr", _TRITON_TYPES[value.dtype])
    if isinstance(value, bool):
        return ("i1", None)
    if isinstance(value, int):
        if value == 1:
            return ("const", 1)
        return ("i32", None) if -(2**31) <= value < 2**31 else ("i64", None)
    if isinstance(value, float):
        return ("fp32", None)
    if value is None:
        return ("const", None)
    raise TypeError(f"no sm_90 compile of a launch argument of type {type(value).__name__}")


def capture(kernel_type: str, config: dict, kernel_names: tuple[str, ...], cases: list[tuple],
            dtype: torch.dtype) -> list[Launch]:
    """Every launch of the named kernels while the starter runs `cases` under `config` (each checked against the
    reference), kernel by kernel in the order of kernel_names."""
    spies = run_spied(kernel_type, config, kernel_names, cases, dtype)
    return [Launch(name, tuple(_describe(a) for a in args), dict(kwargs))
            for name, spy in spies.items() for args, kwargs in zip(spy.args, spy.launches, strict=True)]


def compile_sm90(kernel_type: str, launches: list[Launch]) -> list[Cost]:
    """Triton's sm_90 compile of each launch (one subprocess for all of them)."""
    # UPCAST asks the interpreter to widen bf16 for the CPU; a GPU launch of the same config does not.
    payload = [[launch.kernel, [list(a) for a in launch.args],
                {**launch.meta, **({"UPCAST": False} if "UPCAST" in launch.meta else {})}] for launch in launches]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    source = starter_module(kernel_type).__file__
    proc = subprocess.run([sys.executable, "-c", _COMPILE], input=json.dumps([source, payload]),
                          capture_output=True, text=True, env=env, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [Cost(**cost) for cost in json.loads(proc.stdout.strip().splitlines()[-1])]
