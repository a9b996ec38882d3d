"""The repository config file (`.github/autokernel.yml`) merged with command-line overrides.

One `Config` dataclass holds every setting of `run`, `publish` and `action`; the file and the CLI
use the same names (a YAML key may spell `-` or `_`). Unknown keys and bad values are refused
with a message naming the key, the value and the fix, so a typo never silently falls back to a
default. Documented key by key in docs/config.md.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_CONFIG_PATH = Path(".github") / "autokernel.yml"

DTYPES = ("bf16", "fp16", "fp32")
DEVICES = ("cuda", "cpu")
AGENTS = ("search", "llm")

# Budget when neither the file nor the CLI sets one: a night on a GPU (§2, ~360 experiments an
# hour at §9's loop speed); on a CPU the Triton interpreter takes ~10-60 s an experiment, so a
# short demo run that still shows every stage.
AUTO_BUDGET: dict[str, dict[str, float | int | None]] = {
    "cuda": {"budget_minutes": 60.0, "max_experiments": None},
    "cpu": {"budget_minutes": 5.0, "max_experiments": 6},
}

_SHARD_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_BRANCH_RE = re.compile(r"^(?!/)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/-]+(?<![/.])$")


class ConfigError(ValueError):
    """A setting is unknown or invalid; the message names it, the value and the fix."""


@dataclass
class Config:
    # what to profile
    model: str | None = None  # "FILE.py:CALLABLE" returning the nn.Module
    inputs: str | None = None  # "FILE.py:CALLABLE" returning the example inputs
    example: str | None = None  # a bundled example model instead of `model` (e.g. "llama")
    dtype: str = "bf16"
    device: str | None = None  # None: cuda when a GPU is visible, else cpu
    top: int = 3  # optimise the N ops with the largest Amdahl gain
    # the agent and its bounds
    agent: str = "search"
    llm_model: str | None = None  # a litellm model string
    llm_api_base: str | None = None  # an OpenAI-compatible server for the llm agent
    budget_minutes: float | None = None  # None: AUTO_BUDGET for the device
    max_experiments: int | None = None
    max_usd: float | None = None
    # where results go
    kernels_dir: str = "autokernels"  # the publication's directory in the repository
    branch: str = "autokernel/nightly"  # the bot branch
    base_branch: str | None = None  # None: the repository's default branch / current HEAD
    run_dir: str | None = None  # None: .autokernel-ci/runs/<stamp> in the repository
    min_speedup: float = 1.0  # publish a kernel only if faster than eager by more than this
    # GitHub behaviour
    allow_forks: bool = False  # run `/autokernel` on heads from forks (their code runs on your runner)
    shard: str | None = None  # "K/N": this job optimises shard K of N
    shards: int = 1  # how many shards the workflow's matrix runs (documentation for the merge job)
    bot_name: str = "autokernel-ci[bot]"
    bot_email: str = "autokernel-ci@users.noreply.github.com"
    labels: list[str] = field(default_factory=list)  # labels put on the PR

    def shard_pair(self) -> tuple[int, int] | None:
        return parse_shard(self.shard) if self.shard else None

    def resolved_budget(self, device: str) -> tuple[float, int | None]:
        """(minutes, max experiments) with AUTO_BUDGET filling what was not set."""
        auto = AUTO_BUDGET[device]
        minutes = self.budget_minutes if self.budget_minutes is not None else float(auto["budget_minutes"])
        experiments = self.max_experiments if self.max_experiments is not None else auto["max_experiments"]
        return minutes, (int(experiments) if experiments is not None else None)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(Config)}


def parse_shard(text: str) -> tuple[int, int]:
    m = _SHARD_RE.match(str(text))
    if not m:
        raise ConfigError(f"shard {text!r} is not K/N: write e.g. shard: 1/4 (shard 1 of 4)")
    k, n = int(m.group(1)), int(m.group(2))
    if not 1 <= k <= n:
        raise ConfigError(f"shard {text!r}: K must be between 1 and N (got K={k}, N={n})")
    return k, n


def _normalise_key(key: str) -> str:
    return str(key).strip().replace("-", "_")


def _unknown(key: str, where: str) -> ConfigError:
    close = difflib.get_close_matches(key, FIELDS, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(FIELDS)}"
    return ConfigError(f"{where}: unknown key {key!r}; {hint} (see docs/config.md)")


def _as_bool(key: str, value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "1", "on", "false", "no", "0", "off"):
        return value.strip().lower() in ("true", "yes", "1", "on")
    raise ConfigError(f"{where}: {key} must be true or false, got {value!r}")


def _as_number(key: str, value: Any, where: str, kind: type, minimum: float) -> Any:
    if isinstance(value, bool):
        raise ConfigError(f"{where}: {key} must be a number, got {value!r}")
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {key} must be {'an integer' if kind is int else 'a number'}, "
                          f"got {value!r}") from None
    if kind is int and isinstance(value, float) and not value.is_integer():
        raise ConfigError(f"{where}: {key} must be a whole number, got {value!r}")
    if number < minimum:
        raise ConfigError(f"{where}: {key} must be >= {minimum}, got {value!r}")
    return number


def _choice(key: str, value: Any, choices: tuple[str, ...], where: str) -> str:
    if value not in choices:
        raise ConfigError(f"{where}: {key} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _callable_ref(key: str, value: Any, where: str) -> str:
    if not isinstance(value, str) or ":" not in value or not value.split(":", 1)[0].endswith(".py"):
        raise ConfigError(f"{where}: {key} must look like FILE.py:CALLABLE (e.g. model.py:build_model), "
                          f"got {value!r}")
    return value


def _coerce(key: str, value: Any, where: str) -> Any:
    """Check one setting; return its typed value."""
    if value is None:
        if key in ("dtype", "agent", "kernels_dir", "branch", "top", "min_speedup", "allow_forks", "shards",
                   "bot_name", "bot_email", "labels"):
            raise ConfigError(f"{where}: {key} may not be empty; remove the key to use the default")
        return None
    if key in ("model", "inputs"):
        return _callable_ref(key, value, where)
    if key == "dtype":
        return _choice(key, {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(value, value),
                       DTYPES, where)
    if key == "device":
        return _choice(key, value, DEVICES, where)
    if key == "agent":
        return _choice(key, value, AGENTS, where)
    if key in ("top", "max_experiments", "shards"):
        return _as_number(key, value, where, int, 1)
    if key in ("budget_minutes", "max_usd"):
        return _as_number(key, value, where, float, 0.0)
    if key == "min_speedup":
        return _as_number(key, value, where, float, 0.0)
    if key == "allow_forks":
        return _as_bool(key, value, where)
    if key == "shard":
        k, n = parse_shard(value)
        return f"{k}/{n}"
    if key in ("branch", "base_branch"):
        if not isinstance(value, str) or not _BRANCH_RE.match(value):
            raise ConfigError(f"{where}: {key} {value!r} is not a valid git branch name "
                              "(letters, digits, . _ - /; no '..', no leading '/')")
        return value
    if key == "kernels_dir":
        p = Path(str(value))
        if p.is_absolute() or ".." in p.parts or not str(value).strip() or str(value).strip() in (".", "./"):
            raise ConfigError(f"{where}: kernels_dir must be a relative path inside the repository "
                              f"(e.g. autokernels), got {value!r}")
        return p.as_posix()
    if key == "labels":
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: labels must be a list of strings, got {value!r}")
        return value
    if not isinstance(value, str | int | float):
        raise ConfigError(f"{where}: {key} must be a string, got {value!r}")
    return str(value)


def _apply(values: dict[str, Any], source: Mapping[str, Any], where: str, *, skip_none: bool) -> None:
    for raw_key, value in source.items():
        key = _normalise_key(raw_key)
        if key not in FIELDS:
            raise _unknown(key, where)
        if value is None and skip_none:
            continue
        values[key] = _coerce(key, value, where)


def load_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None,
                *, repo: str | Path = ".") -> Config:
    """Read the config file (default `.github/autokernel.yml` under `repo`, optional) and apply
    `overrides` (CLI / action inputs; None values mean "not given")."""
    values: dict[str, Any] = {}
    if path is None:
        candidate = Path(repo) / DEFAULT_CONFIG_PATH
        path = candidate if candidate.is_file() else None
    elif not Path(path).is_file():
        raise ConfigError(f"config file {path} does not exist; create it (see examples/autokernel.yml) "
                          "or drop --config to use the defaults")
    if path is not None:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path} must be a mapping of key: value, got {type(data).__name__}")
        _apply(values, data, str(path), skip_none=False)
    if overrides:
        _apply(values, overrides, "command line", skip_none=True)
    config = Config(**values)
    if config.agent == "llm" and not config.llm_model:
        raise ConfigError("agent is llm but llm_model is not set: set llm_model (a litellm model string, "
                          "e.g. openai/gpt-4o) or use agent: search")
    if config.model and config.example:
        raise ConfigError(f"both model ({config.model}) and example ({config.example}) are set: keep one")
    if config.shard and parse_shard(config.shard)[1] != config.shards and "shards" in values:
        raise ConfigError(f"shard {config.shard} does not match shards: {config.shards}; "
                          f"use shard K/{config.shards}")
    return config
