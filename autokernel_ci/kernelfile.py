"""The kernel-file contract (DESIGN.md §5), read statically.

A kernel file is untrusted: everything here works on its source text through `ast` and never
imports or executes it (the harness does that in a sandboxed child process).
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import pprint
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from autokernel_ci.plan import DTYPE_NAMES
from autokernel_ci.specs import KERNEL_TYPES, get_spec

BACKENDS = ("triton", "cuda")
REQUIRED_NAMES = ("KERNEL_TYPE", "BACKEND", "CONFIG", "SEARCH_SPACE")


class KernelFileError(ValueError):
    """The file breaks the kernel-file contract; the message names the rule, the value and the fix."""


# KNOB_SCOPE's pseudo-knob for the dtypes of the call a knob acts at (names from plan.DTYPE_NAMES).
SCOPE_DTYPE = "dtype"

@dataclass(frozen=True)
class KernelFile:
    source: str
    kernel_type: str
    backend: str
    config: dict[str, Any]
    search_space: dict[str, list[Any]]
    summary: str
    path: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # KNOB_SCOPE (optional): knob -> {other knob: [values]}; the knob acts only while every other knob named holds
    # one of its values (PINGPONG only with VARIANT "gluon_ws"). Elsewhere its value builds the same kernel.
    # The pseudo-knob "dtype" names the dtypes a knob acts at (FP32_DOT only for fp32 inputs).
    knob_scope: dict[str, dict[str, list[Any]]] = field(default_factory=dict)

    @property
    def source_hash(self) -> str:
        return source_hash(self.source)

    def with_config(self, config: Mapping[str, Any]) -> KernelFile:
        return parse(replace_config(self.source, config), self.path)

    def canonical(self, config: Mapping[str, Any], dtype: str | None = None) -> dict[str, Any]:
        """`config` with every knob that has no effect there (KNOB_SCOPE) set to its first SEARCH_SPACE value, so
        configs that build the same kernel read the same (and hash the same once written). A knob idle at `dtype`
        keeps this file's own value instead: a run tuning bf16 then leaves the file's fp32 setting as it was."""
        out = dict(config)
        for knob, scope in self.knob_scope.items():
            if dtype is not None and dtype not in scope.get(SCOPE_DTYPE, [dtype]):
                out[knob] = self.config.get(knob, self.search_space[knob][0])
            elif any(config.get(other) not in values for other, values in scope.items() if other != SCOPE_DTYPE):
                out[knob] = self.search_space[knob][0]
        return out

    def config_points(self) -> Iterator[dict[str, Any]]:
        """Every CONFIG the SEARCH_SPACE allows (the cross product, keys in file order)."""
        keys = list(self.search_space)
        for values in itertools.product(*(self.search_space[k] for k in keys)):
            yield {**self.config, **dict(zip(keys, values, strict=True))}


# A CUDA kernel's name in a kernel file's source: `__global__ [attributes] void [attributes] NAME(`, the attributes
# being __launch_bounds__(..) and __cluster_dims__(..) (nvcc accepts them on either side of `void`; every CUDA
# starter writes the bounds after it), where NAME may be pasted by a macro (`matmul_wgmma_##NAME(`,
# `reduce_##NAME##p(`): then its literal part, which every launched symbol contains.
_CUDA_ATTRIBUTES = r"(?:(?:__launch_bounds__|__cluster_dims__)\s*\([^)]*\)\s*)*"
_CUDA_KERNEL = re.compile(r"__global__\s+" + _CUDA_ATTRIBUTES + r"void\s+" + _CUDA_ATTRIBUTES +
                          r"(\w+?)\s*(?:##\s*\w+\s*)*\(")


def cuda_kernel_names(source: str) -> list[str]:
    """Names (or, for macro-pasted names, the literal prefix) of the __global__ kernels in `source`."""
    return list(dict.fromkeys(_CUDA_KERNEL.findall(source)))


def own_kernel_names(module: ModuleType, source: str) -> tuple[str, ...]:
    """The device kernels a kernel file defines: its Triton jit functions (unwrapped from autotune / heuristics
    wrappers; their names are the GPU kernel names) and the __global__ kernels of its CUDA source."""
    names = []
    for value in vars(module).values():
        if not type(value).__module__.startswith("triton"):
            continue
        obj = value
        while hasattr(obj, "fn"):  # Autotuner -> JITFunction -> the Python function
            obj = obj.fn
        if hasattr(obj, "__name__"):
            names.append(obj.__name__)
    return tuple(dict.fromkeys([*names, *cuda_kernel_names(source)]))


# Kernels of PyTorch and its libraries, by the namespace their profiler names start with: a candidate's name may be
# a bare prefix pasted by macros ("reduce_"), and aten's at::native::reduce_kernel (which the harness's own input
# check launches inside the watched window) starts with it too.
_LIBRARY_NAMESPACES = ("at::", "c10::", "at_cuda_detail::", "cub::", "cutlass::", "(anonymous namespace)::")


def own_kernel_event(event_name: str, kernel_names: Sequence[str]) -> bool:
    """Whether a profiler kernel event is one of a kernel file's own kernels (`own_kernel_names`): its identifier
    (after `void ` and any namespace, before template arguments or parameters) starts with one of the names, and it
    is not in a library namespace. A name fragment inside another identifier (cuBLAS's `splitKreduce_kernel` for
    `reduce_`) does not count."""
    name = event_name.removeprefix("void ")
    if name.startswith(_LIBRARY_NAMESPACES):
        return False
    ident = name.split("<", 1)[0].split("(", 1)[0].rsplit("::", 1)[-1].strip()
    return any(ident.startswith(k) for k in kernel_names)


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def _literal(node: ast.AST, name: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError as exc:
        raise KernelFileError(
            f"{name} must be a literal (numbers, strings, lists, dicts), got `{ast.unparse(node)}`: "
            "write the value out instead of computing it"
        ) from exc


def _top_level_assignments(tree: ast.Module) -> dict[str, ast.Assign]:
    found: dict[str, ast.Assign] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = node
    return found


def parse(source: str, path: Path | None = None) -> KernelFile:
    """Check the contract and read the declared facts without executing the file."""
    where = str(path) if path else "<kernel source>"
    try:
        tree = ast.parse(source, filename=where)
    except SyntaxError as exc:
        raise KernelFileError(f"{where}: syntax error at line {exc.lineno}: {exc.msg}") from exc
    assigns = _top_level_assignments(tree)
    missing = [n for n in REQUIRED_NAMES if n not in assigns]
    if missing:
        raise KernelFileError(
            f"{where}: missing top-level {', '.join(missing)}; a kernel file declares "
            f"{', '.join(REQUIRED_NAMES)} and defines kernel_fn (DESIGN.md §5)"
        )
    values = {n: _literal(assigns[n].value, n) for n in REQUIRED_NAMES}
    kernel_type, backend = values["KERNEL_TYPE"], values["BACKEND"]
    if kernel_type not in KERNEL_TYPES:
        raise KernelFileError(f"{where}: KERNEL_TYPE={kernel_type!r} is not one of {', '.join(KERNEL_TYPES)}")
    if backend not in BACKENDS:
        raise KernelFileError(f"{where}: BACKEND={backend!r} is not one of {', '.join(BACKENDS)}")
    config, space = values["CONFIG"], values["SEARCH_SPACE"]
    if not isinstance(config, dict) or not isinstance(space, dict):
        raise KernelFileError(f"{where}: CONFIG and SEARCH_SPACE must be dicts")
    for key, options in space.items():
        if not isinstance(options, list) or not options:
            raise KernelFileError(f"{where}: SEARCH_SPACE[{key!r}] must be a non-empty list, got {options!r}")
        if key not in config:
            raise KernelFileError(f"{where}: SEARCH_SPACE names {key!r} which CONFIG does not set; add it to CONFIG")
    scope = _literal(assigns["KNOB_SCOPE"].value, "KNOB_SCOPE") if "KNOB_SCOPE" in assigns else {}
    _check_knob_scope(scope, space, where)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "kernel_fn"), None)
    if fn is None:
        raise KernelFileError(f"{where}: no top-level `def kernel_fn(...)`")
    expected = get_spec(kernel_type).arg_names
    got = tuple(a.arg for a in fn.args.args)
    if got != expected:
        raise KernelFileError(
            f"{where}: kernel_fn{got} does not match the {kernel_type} signature kernel_fn{expected}"
        )
    return KernelFile(
        source=source,
        kernel_type=kernel_type,
        backend=backend,
        config=config,
        search_space=space,
        summary=(ast.get_docstring(tree) or "").strip().splitlines()[0] if ast.get_docstring(tree) else "",
        path=path,
        knob_scope=scope,
    )


def _check_knob_scope(scope: Any, space: dict[str, list[Any]], where: str) -> None:
    fix = ('write KNOB_SCOPE = {"KNOB": {"OTHER_KNOB": [values where KNOB acts]}} with SEARCH_SPACE names and values, '
           f'or {{"KNOB": {{"{SCOPE_DTYPE}": [dtypes from {list(DTYPE_NAMES)}]}}}}')
    if not isinstance(scope, dict):
        raise KernelFileError(f"{where}: KNOB_SCOPE must be a dict, got {scope!r}: {fix}")
    for knob, conditions in scope.items():
        if knob not in space:
            raise KernelFileError(f"{where}: KNOB_SCOPE names {knob!r}, which SEARCH_SPACE does not: {fix}")
        if not isinstance(conditions, dict) or not conditions:
            raise KernelFileError(f"{where}: KNOB_SCOPE[{knob!r}] must be a non-empty dict, got {conditions!r}: {fix}")
        for other, values in conditions.items():
            if other == SCOPE_DTYPE:
                if not isinstance(values, list) or not values or any(v not in DTYPE_NAMES for v in values):
                    raise KernelFileError(f"{where}: KNOB_SCOPE[{knob!r}][{SCOPE_DTYPE!r}] = {values!r} must be a "
                                          f"non-empty list of dtypes from {list(DTYPE_NAMES)}: {fix}")
                continue
            if other == knob or other not in space:
                raise KernelFileError(f"{where}: KNOB_SCOPE[{knob!r}] depends on {other!r}, which is not another "
                                      f"SEARCH_SPACE knob: {fix}")
            if not isinstance(values, list) or not values or any(v not in space[other] for v in values):
                raise KernelFileError(f"{where}: KNOB_SCOPE[{knob!r}][{other!r}] = {values!r} must be a non-empty "
                                      f"list of SEARCH_SPACE[{other!r}] values {space[other]!r}: {fix}")


def load(path: str | Path) -> KernelFile:
    p = Path(path)
    if not p.is_file():
        raise KernelFileError(f"kernel file {p} does not exist")
    return parse(p.read_text(), p)


def replace_config(source: str, config: Mapping[str, Any]) -> str:
    """Return `source` with its top-level CONFIG literal replaced by `config` (other lines untouched)."""
    tree = ast.parse(source)
    node = _top_level_assignments(tree).get("CONFIG")
    if node is None:
        raise KernelFileError("no top-level CONFIG to replace")
    lines = source.splitlines(keepends=True)
    start, end = node.lineno - 1, node.end_lineno  # type: ignore[attr-defined]
    tail = lines[end - 1][node.end_col_offset :]  # type: ignore[attr-defined]
    text = "CONFIG = " + pprint.pformat(dict(config), sort_dicts=False, width=100) + tail
    if not text.endswith("\n"):
        text += "\n"
    return "".join(lines[:start]) + text + "".join(lines[end:])
