"""Shared fixture for the harness tests: one warm CPU Evaluator for the whole session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def evaluator():
    from autokernel_ci.harness import Evaluator

    with Evaluator("cpu", timeout_s=120) as ev:
        yield ev
