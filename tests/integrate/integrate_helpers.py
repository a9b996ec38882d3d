"""Helpers shared by the plug-back tests."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "examples" / "models"
LLAMA = f"{MODELS / 'llama.py'}:build_model"
