"""Static policy for agent-written kernel files (DESIGN.md §7): read with `ast`, never executed.

A candidate may use torch, triton and a few pure-Python helpers; anything that reaches files, the
network, processes, the interpreter's internals or monkeypatches torch is rejected before the
harness ever imports the file. This is a first wall, not the only one: the harness still runs the
file in a scrubbed, sandboxed child process and checks the aten calls it makes at run time.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from autokernel_ci.kernelfile import KernelFile, KernelFileError, parse

# triton.tools.tensor_descriptor: a dataclass describing a tensor for Hopper's bulk tensor copies (TMA).
# triton.experimental.gluon: Triton's lower-level language (explicit layouts, wgmma, mbarriers; the flash
# attention starter's sm_90 kernel), compiled by the same compiler as triton.language.
GLUON_IMPORTS = frozenset({"triton.experimental", "triton.experimental.gluon", "triton.experimental.gluon.language",
                           "triton.experimental.gluon.language.nvidia.hopper",
                           "triton.experimental.gluon.nvidia.hopper"})
ALLOWED_IMPORTS = frozenset({"torch", "triton", "triton.language", "triton.tools.tensor_descriptor", "math",
                             "functools", "typing", "__future__"}) | GLUON_IMPORTS
CUDA_IMPORTS = frozenset({"autokernel_ci.nvrtc"})
# Named so the message can say why, even though an unimported module name is only a NameError.
FORBIDDEN_MODULES = frozenset({"os", "sys", "subprocess", "socket", "ctypes", "importlib", "builtins", "pathlib",
                               "shutil", "pickle", "io", "multiprocessing", "threading", "signal", "urllib",
                               "http", "requests", "marshal", "gc", "inspect", "tempfile", "glob"})
FORBIDDEN_CALLS = frozenset({"open", "eval", "exec", "compile", "__import__", "setattr", "delattr", "globals",
                             "locals", "vars", "breakpoint", "input", "help", "exit", "quit", "memoryview"})
# Attributes of torch that reach files or native code (torch.load unpickles, torch.utils.cpp_extension
# runs the host compiler, torch.ops.load_library dlopens); triton's `tl.load` is of course fine.
TORCH_FORBIDDEN_ATTRIBUTES = frozenset({"load", "save", "hub", "utils", "_C", "_dynamo", "_inductor", "from_file",
                                        "classes", "package", "jit", "compile", "library"})
# Attributes no kernel needs on any object: processes, native code, frames and code objects.
FORBIDDEN_ATTRIBUTES = frozenset({"cpp_extension", "load_inline", "load_library", "system", "popen", "f_globals",
                                  "f_locals", "f_back", "f_builtins", "f_code", "gi_frame", "gi_code", "cr_frame",
                                  "tb_frame", "co_code", "mro"})
ALLOWED_DUNDER_NAMES = frozenset({"__name__"})


@dataclass(frozen=True)
class Violation:
    line: int
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.rule}: {self.detail}"


class PolicyError(ValueError):
    def __init__(self, violations: list[Violation]):
        self.violations = violations
        shown = "; ".join(str(v) for v in violations[:5])
        more = f" (+{len(violations) - 5} more)" if len(violations) > 5 else ""
        super().__init__(f"kernel file breaks the agent policy: {shown}{more}; a kernel may import only "
                         f"{', '.join(sorted(ALLOWED_IMPORTS - {'__future__'}))} and touch no files, processes "
                         "or interpreter internals")


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and len(name) > 4


class _Checker(ast.NodeVisitor):
    def __init__(self, allowed_imports: frozenset[str]):
        self.allowed = allowed_imports
        self.module_names: set[str] = set()  # local names bound to imported modules
        self.torch_names: set[str] = {"torch"}  # local names bound to torch or one of its submodules
        self.found: list[Violation] = []

    def flag(self, node: ast.AST, rule: str, detail: str) -> None:
        self.found.append(Violation(getattr(node, "lineno", 0), rule, detail))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name not in self.allowed:
                self.flag(node, "import", f"`import {alias.name}` is not allowed")
            local = (alias.asname or alias.name).split(".")[0]
            self.module_names.add(local)
            if alias.name.split(".")[0] == "torch":
                self.torch_names.add(local)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.flag(node, "import", "relative imports are not allowed")
        elif module not in self.allowed and not any(f"{module}.{a.name}" in self.allowed for a in node.names):
            self.flag(node, "import", f"`from {module} import ...` is not allowed")
        for alias in node.names:
            if alias.name == "*":
                self.flag(node, "import", f"`from {module} import *` hides what is used")
            elif (alias.name in FORBIDDEN_ATTRIBUTES or _is_dunder(alias.name)
                  or (module.split(".")[0] == "torch" and alias.name in TORCH_FORBIDDEN_ATTRIBUTES)):
                self.flag(node, "import", f"`from {module} import {alias.name}` is not allowed")
            if f"{module}.{alias.name}" in self.allowed:
                self.module_names.add(alias.asname or alias.name)
        if module in self.allowed:
            self.module_names.update(a.asname or a.name for a in node.names
                                     if f"{module}.{a.name}" in self.allowed or module == "triton")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_MODULES:
            self.flag(node, "module", f"`{node.id}` (file, process or interpreter access) is not allowed")
        elif node.id in FORBIDDEN_CALLS:
            self.flag(node, "builtin", f"`{node.id}` is not allowed")
        elif _is_dunder(node.id) and node.id not in ALLOWED_DUNDER_NAMES:
            self.flag(node, "dunder", f"`{node.id}` reaches interpreter internals")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if _is_dunder(node.attr):
            self.flag(node, "dunder", f"attribute `.{node.attr}` reaches interpreter internals")
        elif node.attr in FORBIDDEN_ATTRIBUTES:
            self.flag(node, "attribute", f"`.{node.attr}` reaches files, native code or frames")
        elif node.attr in TORCH_FORBIDDEN_ATTRIBUTES and self._root(node) in self.torch_names:
            self.flag(node, "attribute", f"`{self._root(node)}...{node.attr}` reaches files or native code")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "getattr" and node.args:
            target, name = node.args[0], node.args[1] if len(node.args) > 1 else None
            if isinstance(target, ast.Name) and target.id in self.module_names:
                self.flag(node, "getattr", f"getattr on module `{target.id}` with a string name")
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                self.flag(node, "getattr", "getattr with a computed attribute name")
            elif _is_dunder(name.value) or name.value in FORBIDDEN_ATTRIBUTES | TORCH_FORBIDDEN_ATTRIBUTES:
                self.flag(node, "getattr", f"getattr(..., {name.value!r})")
        self.generic_visit(node)

    def _root(self, node: ast.AST) -> str | None:
        while isinstance(node, ast.Attribute | ast.Subscript):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    def _check_targets(self, node: ast.AST, targets: list[ast.expr]) -> None:
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute | ast.Subscript) and self._root(sub) in self.module_names:
                    self.flag(node, "monkeypatch", f"assigning into module `{self._root(sub)}` changes what the "
                              "reference and the harness see")
                    break

    def visit_Assign(self, node: ast.Assign) -> None:
        self._check_targets(node, node.targets)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_targets(node, [node.target])
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_targets(node, [node.target])
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        self._check_targets(node, node.targets)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        touched = [n for n in node.names if n in self.module_names or n in ("torch", "triton", "tl")]
        if touched:
            self.flag(node, "global", f"`global {', '.join(touched)}` rebinds a module")

    visit_Nonlocal = visit_Global  # type: ignore[assignment]


def violations(source: str, backend: str = "triton") -> list[Violation]:
    """Every policy violation of `source` (empty when it is acceptable); a syntax error is one violation."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [Violation(exc.lineno or 0, "syntax", exc.msg)]
    allowed = ALLOWED_IMPORTS | (CUDA_IMPORTS if backend == "cuda" else frozenset())
    checker = _Checker(allowed)
    for node in ast.walk(tree):  # first pass: learn the module aliases wherever they are used
        if isinstance(node, ast.Import | ast.ImportFrom):
            checker.visit(node)
    checker.found = []
    checker.visit(tree)
    return checker.found


def check(source: str, *, kernel_type: str | None = None, backend: str | None = None) -> KernelFile:
    """The parsed kernel file if it passes the policy and the kernel-file contract; else PolicyError or
    KernelFileError naming what broke."""
    try:
        kernel = parse(source)
    except KernelFileError:
        found = violations(source)
        if found:
            raise PolicyError(found) from None
        raise
    found = violations(source, kernel.backend)
    if found:
        raise PolicyError(found)
    if kernel_type is not None and kernel.kernel_type != kernel_type:
        raise KernelFileError(f"KERNEL_TYPE={kernel.kernel_type!r} but this op is a {kernel_type}: keep "
                              f"KERNEL_TYPE = {kernel_type!r}")
    if backend is not None and kernel.backend != backend:
        raise KernelFileError(f"BACKEND={kernel.backend!r} but this op's kernel is {backend}: keep the backend")
    return kernel
