"""Paths and small helpers shared by the harness tests."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
EXPLOITS = HERE / "exploits"
FIXTURES = HERE / "fixtures"


def source(path: Path) -> str:
    return path.read_text()


def first_failure(verdict):
    return next((f for s in verdict.stages for f in s.failures), None)
