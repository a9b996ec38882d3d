"""Fixtures for loop tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from loop_helpers import DEFAULT_OPS, make_plan


@pytest.fixture
def plan_file(tmp_path):
    def write(ops=DEFAULT_OPS) -> Path:
        path = tmp_path / "plan.json"
        make_plan(ops).save(path)
        return path

    return write
