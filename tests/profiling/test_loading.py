"""Loading FILE.py:CALLABLE references, and every bad input through the real CLI (exit 2 + the fix)."""

from __future__ import annotations

import pytest
import torch
from profiling_helpers import MODELS, cli
from torch import nn

from autokernel_ci.profiling.loading import (
    ForwardError,
    LoadError,
    build_inputs,
    build_model,
    load_callable,
    parse_ref,
    run_forward,
)


def test_parse_ref_reads_literal_kwargs_without_evaluating_code():
    r = parse_ref('m/model.py:build_model(size="7b", layers=2, flag=True)')
    assert (str(r.path), r.name, r.kwargs) == ("m/model.py", "build_model", {"size": "7b", "layers": 2, "flag": True})
    with pytest.raises(LoadError, match="not a literal"):
        parse_ref("m.py:f(size=__import__('os').getcwd())")
    with pytest.raises(LoadError, match="FILE.py:CALLABLE"):
        parse_ref("model.py")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("example", ["llama", "gpt2", "bert"])
def test_examples_build_and_run(example, dtype):
    ref = f"{MODELS / example}.py:build_model"
    model = build_model(ref, dtype=dtype, device="cpu")
    assert not model.training and next(model.parameters()).dtype == dtype
    inputs = build_inputs(ref, None, dtype=dtype, device="cpu")
    out = run_forward(model, inputs)
    logits = out[1] if isinstance(out, tuple) else out
    assert logits.dtype == dtype and torch.isfinite(logits.float()).all()


def test_model_kwargs_reach_example_inputs():
    inputs = build_inputs(f'{MODELS / "llama.py"}:build_model(size="small")', None, dtype=torch.float32, device="cpu")
    assert tuple(inputs[0].shape) == (1, 256)  # the "small" config's batch x seq


def test_load_callable_names_what_exists(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def build():\n    return 1\n")
    with pytest.raises(LoadError, match="no 'nope'.*build"):
        load_callable(f"{f}:nope")
    with pytest.raises(LoadError, match="returned a int, not a torch.nn.Module"):
        build_model(f"{f}:build", dtype=torch.float32, device="cpu")


def test_forward_error_names_input_shapes():
    model = nn.Linear(8, 4)
    with pytest.raises(ForwardError, match=r"inputs \[0: \(2, 5\) float32\].*mat1 and mat2"):
        run_forward(model, (torch.randn(2, 5),))


def _bad_model_file(tmp_path, body: str):
    f = tmp_path / "bad.py"
    f.write_text(body)
    return f


@pytest.mark.parametrize("case,body,ref_suffix,expect", [
    ("missing_file", None, "missing.py:build", "does not exist"),
    ("import_error", "import torch\nraise RuntimeError('boom at import')\n", "bad.py:build",
     "importing .*bad.py failed: RuntimeError: boom at import"),
    ("not_a_module", "def build():\n    return {'not': 'a module'}\n", "bad.py:build",
     "returned a dict, not a torch.nn.Module"),
    ("wrong_inputs", "import torch\ndef build():\n    return torch.nn.Linear(8, 4)\n"
     "def example_inputs():\n    return (torch.randn(3, 5),)\n", "bad.py:build",
     r"forward failed on inputs \[0: \(3, 5\) float32\]"),
    ("no_inputs", "import torch\ndef build():\n    return torch.nn.Linear(8, 4)\n", "bad.py:build",
     "pass --inputs FILE.py:CALLABLE or define example_inputs"),
])
def test_cli_bad_input_exits_2_with_the_fix(tmp_path, case, body, ref_suffix, expect):
    if body is not None:
        _bad_model_file(tmp_path, body)
    r = cli("profile", "--model", f"{tmp_path}/{ref_suffix}", "--device", "cpu", "--dtype", "fp32")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert __import__("re").search(expect, r.stderr), r.stderr


def test_cli_cuda_without_gpu_says_so():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    r = cli("profile", "--model", f"{MODELS / 'llama.py'}:build_model", "--device", "cuda")
    assert r.returncode == 2 and "torch sees no GPU" in r.stderr


def test_oom_message_suggests_smaller_size(tmp_path):
    """OOM through the real CLI: a model whose build raises torch.OutOfMemoryError (what CUDA raises)."""
    _bad_model_file(tmp_path, "import torch\ndef build():\n"
                    "    raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 80.00 GiB')\n")
    r = cli("profile", "--model", f"{tmp_path}/bad.py:build", "--device", "cpu", "--dtype", "fp32")
    assert r.returncode == 2 and "ran out of memory" in r.stderr and "smaller model size or batch" in r.stderr
