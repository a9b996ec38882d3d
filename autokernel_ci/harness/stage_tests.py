"""The five verification stages as pytest tests.

Each test is one line: `check_stage(run, name)` runs stage `name` of the session's VerifyRun
(stages.py) and turns its result into pass / skip (not run) / fail. Three ways in:

- `pytest --autokernel-kernel=PATH`: plugin.py collects this module by itself;
- the sandbox worker (worker.py) writes a one-line test file that star-imports the tests below
  (`__all__`) and hands the plugin its VerifyRun;
- the published tests/test_verify.py (templates/test_verify.py.j2) parametrizes over kernels and
  stages and calls `test_<stage>(autokernel_run)` for each stage name in `STAGES`.

The stage names and their order are `results.STAGES`; `STAGE_TESTS` maps each to its test, so a
caller never builds a function name from a string.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from autokernel_ci.harness.results import Status

__all__ = ["test_smoke", "test_shape_sweep", "test_numerical_stability", "test_determinism", "test_edge_cases"]


def check_stage(run, name: str) -> None:
    """Run stage `name` of `run` (a VerifyRun or LoadFailedRun): skip when it was not run, fail when it failed."""
    result = run.run_stage(name)
    if result.status is Status.NOT_RUN:
        pytest.skip(result.reason)
    if result.status is not Status.PASS:
        pytest.fail(f"{name} {result.status}: {result.reason}", pytrace=False)


def test_smoke(autokernel_run):
    check_stage(autokernel_run, "smoke")


def test_shape_sweep(autokernel_run):
    check_stage(autokernel_run, "shape_sweep")


def test_numerical_stability(autokernel_run):
    check_stage(autokernel_run, "numerical_stability")


def test_determinism(autokernel_run):
    check_stage(autokernel_run, "determinism")


def test_edge_cases(autokernel_run):
    check_stage(autokernel_run, "edge_cases")


STAGE_TESTS: dict[str, Callable] = {
    "smoke": test_smoke,
    "shape_sweep": test_shape_sweep,
    "numerical_stability": test_numerical_stability,
    "determinism": test_determinism,
    "edge_cases": test_edge_cases,
}
