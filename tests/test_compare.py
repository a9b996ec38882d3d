import pytest
import torch

from autokernel_ci.compare import compare
from autokernel_ci.specs.base import Tolerance

TOL = Tolerance(atol=1e-3, rtol=1e-3, rel_l2=1e-3)


def test_match_passes():
    ref = torch.randn(4, 5, dtype=torch.float64)
    assert compare(ref.float(), ref, TOL) is None


def test_single_bad_element_reports_its_index():
    ref = torch.randn(4, 5, dtype=torch.float64)
    out = ref.clone().float()
    out[2, 3] += 1
    f = compare(out, ref, TOL)
    assert f.check == "allclose" and f.first_bad_index == [2, 3] and f.max_abs_err == pytest.approx(1, rel=1e-4)


def test_nan_fails_even_within_tolerance_budget():
    ref = torch.randn(8, dtype=torch.float64)
    out = ref.clone()
    out[5] = float("nan")
    f = compare(out, ref, Tolerance(1e9, 1e9, 1e9))
    assert f.check == "nan_inf" and f.first_bad_index == [5]


def test_uniform_small_error_fails_on_rel_l2_only():
    ref = torch.randn(1000, dtype=torch.float64)
    out = ref * (1 + 5e-3)
    f = compare(out, ref, Tolerance(atol=1e-1, rtol=1e-1, rel_l2=1e-3))
    assert f.check == "allclose" and "relative L2" in f.message


def test_shape_and_dtype_and_type_mismatch():
    ref = torch.zeros(3, dtype=torch.float64)
    assert compare(torch.zeros(4), ref, TOL).check == "output_shape"
    assert compare(torch.zeros(3), ref, TOL, expect_dtype=torch.float16).check == "output_dtype"
    assert compare([0, 0, 0], ref, TOL).check == "output_type"


def test_inf_in_reference_positions_are_not_counted():
    ref = torch.tensor([float("-inf"), 1.0], dtype=torch.float64)
    assert compare(torch.tensor([float("-inf"), 1.0]), ref, TOL) is None
