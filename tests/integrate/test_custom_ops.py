"""Every kernel type registers as torch.ops.autokernel.<op_id>, runs, and has a correct fake impl."""

from __future__ import annotations

import pytest
import torch
from standins import write_standins
from torch._subclasses.fake_tensor import FakeTensorMode

from autokernel_ci.integrate.custom_ops import RegistrationError, register_kernels
from autokernel_ci.specs import KERNEL_TYPES, get_spec


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    return write_standins(tmp_path_factory.mktemp("standins"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_registered_op_runs_and_fakes_its_output(standins, kernel_type, dtype):
    spec = get_spec(kernel_type)
    op = register_kernels({f"{kernel_type}-0": standins[kernel_type]})[f"{kernel_type}-0"]
    assert op.qualname == f"autokernel::{kernel_type}_0"
    shape = spec.shapes("cpu")[0]
    inputs = spec.make_inputs(shape, dtype, torch.device("cpu"), torch.Generator().manual_seed(0))
    out = op(*inputs)
    want = spec.reference(*inputs)
    assert out.shape == want.shape and out.dtype == (spec.output_dtype or inputs[0].dtype)
    assert torch.allclose(out.float(), want.float(), atol=1e-2, rtol=1e-2)
    with FakeTensorMode() as mode:
        fake_inputs = tuple(mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in inputs)
        fake_out = op(*fake_inputs)
    assert fake_out.shape == out.shape and fake_out.dtype == out.dtype


def test_kernel_of_the_wrong_type_is_refused(standins):
    with pytest.raises(RegistrationError, match="is a softmax kernel but plan op rmsnorm-7 is rmsnorm"):
        register_kernels({"rmsnorm-7": standins["softmax"]})
