"""The static policy: every starter passes; each escape route is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from autokernel_ci.agents.policy import PolicyError, check, violations
from autokernel_ci.kernelfile import KernelFileError
from autokernel_ci.paths import kernels_dir, starter_kernel

STARTERS = sorted(kernels_dir().glob("*/*.py"))


@pytest.mark.parametrize("path", STARTERS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_starter_passes_the_policy(path: Path):
    kernel = check(path.read_text())
    assert kernel.backend == path.parent.name


ESCAPES = {
    "import os": ("import os\n", "os.getpid()", "import"),
    "from subprocess": ("from subprocess import run\n", "run(['id'])", "import"),
    "importlib": ("import importlib\n", "importlib.import_module('os')", "import"),
    "ctypes": ("import ctypes\n", "ctypes.CDLL(None)", "import"),
    "socket": ("import socket\n", "socket.socket()", "import"),
    "pickle": ("import pickle\n", "pickle.loads(b'')", "import"),
    "open": ("", "open('/etc/passwd').read()", "builtin"),
    "eval": ("", "eval('1+1')", "builtin"),
    "exec": ("", "exec('x=1')", "builtin"),
    "compile": ("", "compile('1', 'f', 'eval')", "builtin"),
    "__import__": ("", "__import__('os')", "builtin"),
    "dunder class walk": ("", "().__class__.__base__.__subclasses__()", "dunder"),
    "__globals__": ("", "kernel_fn.__globals__['torch']", "dunder"),
    "__builtins__": ("", "__builtins__['open']", "dunder"),
    "getattr module": ("", "getattr(torch, 'softmax')", "getattr"),
    "getattr computed": ("", "getattr(x, 'so' + 'ftmax')", "getattr"),
    "setattr": ("", "setattr(torch, 'softmax', None)", "builtin"),
    "torch.load": ("", "torch.load('/tmp/ref.pt')", "attribute"),
    "cpp_extension": ("", "torch.utils.cpp_extension.load_inline('', '')", "attribute"),
    "monkeypatch torch": ("", "torch.softmax = lambda t, d: t", "monkeypatch"),
    "frame walk": ("", "x.tb_frame.f_back.f_globals", "attribute"),
}


def _with(prelude: str, statement: str) -> str:
    source = starter_kernel("rmsnorm").read_text().replace("import torch\n", f"{prelude}import torch\n", 1)
    return source.replace("def kernel_fn(x, weight, eps):\n", f"def kernel_fn(x, weight, eps):\n    {statement}\n")


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escape_is_rejected_with_its_rule(name):
    prelude, statement, rule = ESCAPES[name]
    found = violations(_with(prelude, statement))
    assert rule in {v.rule for v in found}, [str(v) for v in found]
    with pytest.raises(PolicyError, match=rule):
        check(_with(prelude, statement))


def test_global_torch_is_rejected():
    source = _with("", "global torch")
    assert "global" in {v.rule for v in violations(source)}


def test_nvrtc_import_only_for_cuda_files():
    cuda = starter_kernel("rmsnorm", "cuda").read_text()
    assert not violations(cuda, "cuda")
    triton = _with("from autokernel_ci import nvrtc\n", "pass")
    assert "import" in {v.rule for v in violations(triton, "triton")}


def test_contract_is_checked_too():
    source = starter_kernel("rmsnorm").read_text().replace('KERNEL_TYPE = "rmsnorm"', 'KERNEL_TYPE = "softmax"')
    with pytest.raises(KernelFileError):
        check(source, kernel_type="rmsnorm")
    with pytest.raises(KernelFileError, match="but this op is a softmax"):
        check(starter_kernel("rmsnorm").read_text(), kernel_type="softmax")
