"""load_config: the YAML file, CLI overrides on top, and every bad value refused with its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from autokernel_ci.config import AUTO_BUDGET, Config, ConfigError, load_config

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "autokernel.yml"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / ".github" / "autokernel.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_example_config_loads_and_is_found_by_default(tmp_path):
    cfg = load_config(EXAMPLE)
    assert cfg.model == "models/llama.py:build_model" and cfg.budget_minutes == 360.0 and cfg.labels == ["performance"]
    _write(tmp_path, EXAMPLE.read_text())
    assert load_config(None, repo=tmp_path) == cfg


def test_overrides_win_and_none_means_not_given(tmp_path):
    path = _write(tmp_path, "budget-minutes: 30\nagent: search\nallow_forks: 'yes'\ndtype: bfloat16\n")
    cfg = load_config(path, {"budget_minutes": 5, "max_experiments": None, "shard": "2/4"})
    assert (cfg.budget_minutes, cfg.max_experiments, cfg.shard, cfg.allow_forks, cfg.dtype) == \
        (5.0, None, "2/4", True, "bf16")
    assert cfg.shard_pair() == (2, 4)


@pytest.mark.parametrize("text, match", [
    ("budget_minuts: 3\n", "did you mean 'budget_minutes'"),
    ("dtype: fp8\n", "dtype must be one of bf16, fp16, fp32"),
    ("max_experiments: 2.5\n", "whole number"),
    ("top: 0\n", "top must be >= 1"),
    ("allow_forks: maybe\n", "true or false"),
    ("shard: 3/2\n", "K must be between 1 and N"),
    ("shard: half\n", "is not K/N"),
    ("branch: '../main'\n", "not a valid git branch"),
    ("kernels_dir: /abs\n", "relative path inside the repository"),
    ("model: build_model\n", "FILE.py:CALLABLE"),
    ("agent: llm\n", "llm_model is not set"),
    ("- a\n- b\n", "must be a mapping"),
    ("model: [\n", "not valid YAML"),
    ("model: a.py:f\nexample: llama\n", "keep one"),
])
def test_bad_values_are_refused_with_the_fix(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        load_config(_write(tmp_path, text))


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_auto_budget_fills_only_what_is_unset(device):
    assert Config().resolved_budget(device) == (AUTO_BUDGET[device]["budget_minutes"],
                                                AUTO_BUDGET[device]["max_experiments"])
    assert Config(budget_minutes=1.5, max_experiments=2).resolved_budget(device) == (1.5, 2)


def test_missing_explicit_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yml")
    with pytest.raises(ConfigError, match="unknown key 'colour'"):
        load_config(None, {"colour": "red"})
