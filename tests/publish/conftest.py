"""Fixtures for the publish tests (defined in ghworld.py, shared with tests/action)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ghworld import model_repo, world  # noqa: E402,F401  (fixtures)
