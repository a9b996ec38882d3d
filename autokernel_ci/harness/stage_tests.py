"""The five verification stages as pytest tests.

Collected automatically by `pytest --autokernel-kernel=PATH` (see plugin.py), or imported by a
generated tests/test_verify.py that overrides the `autokernel_kernel` fixture:

    from autokernel_ci.harness.stage_tests import *  # noqa: F401,F403

    @pytest.fixture(scope="session", params=["autokernels/kernels/rmsnorm-0.py"])
    def autokernel_kernel(request):
        return request.param
"""

from __future__ import annotations

import pytest

from autokernel_ci.harness.results import Status

__all__ = ["test_smoke", "test_shape_sweep", "test_numerical_stability", "test_determinism", "test_edge_cases"]


def _check(run, name: str) -> None:
    result = run.run_stage(name)
    if result.status is Status.NOT_RUN:
        pytest.skip(result.reason)
    if result.status is not Status.PASS:
        pytest.fail(f"{name} {result.status}: {result.reason}", pytrace=False)


def test_smoke(autokernel_run):
    _check(autokernel_run, "smoke")


def test_shape_sweep(autokernel_run):
    _check(autokernel_run, "shape_sweep")


def test_numerical_stability(autokernel_run):
    _check(autokernel_run, "numerical_stability")


def test_determinism(autokernel_run):
    _check(autokernel_run, "determinism")


def test_edge_cases(autokernel_run):
    _check(autokernel_run, "edge_cases")
