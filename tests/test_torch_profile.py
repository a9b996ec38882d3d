"""Our profiles drop torch's false "clears events at the end of each cycle" warning and nothing else, and keep
Kineto's log lines off unless the user sets their level."""

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity

from autokernel_ci import torch_profile as module
from autokernel_ci.torch_profile import torch_profile


class _SecondCycle(torch.profiler.profile):
    """torch's own code path to the warning: a block that is the profile's second cycle (torch 2.12+ warn there;
    2.10-2.11 warn on every profile)."""

    def __enter__(self):
        super().__enter__()
        super().__exit__(None, None, None)  # a first, empty cycle
        return super().__enter__()


def _warnings_of(block) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        block()
    return [str(w.message) for w in caught]


@pytest.fixture
def second_cycle(monkeypatch):
    monkeypatch.setattr(torch.profiler.profiler, "_WARNINGS_SHOWN", set())  # torch warns once a process
    monkeypatch.setattr(torch.profiler, "profile", _SecondCycle)


def _is_cycle_warning(text: str) -> bool:
    return text.startswith("Warning: Profiler clears events at the end of each cycle")


def test_torch_warns_on_a_second_cycle(second_cycle):
    """The premise: torch's code gives the warning here, so the next test's silence is our filter's doing."""
    def bare():
        with torch.profiler.profile(activities=[ProfilerActivity.CPU]):
            torch.ones(4).sum()

    assert any(_is_cycle_warning(w) for w in _warnings_of(bare))


@pytest.mark.parametrize("options", [{}, {"record_shapes": True}])
def test_torch_profile_drops_only_the_cycle_warning(second_cycle, options):
    def ours():
        with torch_profile([ProfilerActivity.CPU], **options) as prof:
            torch.ones(4).sum()
            warnings.warn("the model's own warning", UserWarning, stacklevel=1)
        assert any(e.name == "aten::sum" for e in prof.events())  # it profiled

    seen = _warnings_of(ours)
    assert not any(_is_cycle_warning(w) for w in seen)
    assert "the model's own warning" in seen
    assert torch.profiler.profiler._WARNINGS_SHOWN  # torch did raise it inside; the filter took it


def test_the_filter_matches_both_torch_wordings():
    for text in ("Warning: Profiler clears events at the end of each cycle.Only events from the current cycle",
                 "Warning: Profiler clears events at the end of each cycle. Only events from the current cycle"):
        assert re.match(module.FALSE_CYCLE_WARNING, text)


_PROFILE_ONCE = ("import torch\nfrom torch.profiler import ProfilerActivity\n{setup}\n"
                 "with {profile}:\n    torch.ones(3) + 1\n")
BARE = _PROFILE_ONCE.format(setup="", profile="torch.profiler.profile(activities=[ProfilerActivity.CPU])")
OURS = _PROFILE_ONCE.format(setup="from autokernel_ci.torch_profile import torch_profile",
                            profile="torch_profile([ProfilerActivity.CPU])")


def _kineto_log(script: str, **env: str) -> list[str]:
    """The profiler_start / profiler_stop lines a fresh process writes (Kineto reads its level once a process)."""
    base = {k: v for k, v in os.environ.items() if k != module.PROFILER_LOG_ENV}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env={**base, **env},
                          cwd=Path(__file__).resolve().parents[1], timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stderr.splitlines() if "profiler_start" in line or "profiler_stop" in line]


def test_kinetos_log_stays_off_unless_the_user_sets_its_level():
    """torch 2.13's Kineto logs two lines a profile; ours log none, and a KINETO_LOG_LEVEL of the user's own brings
    back what torch logs by default."""
    if not _kineto_log(BARE):  # else both assertions below would hold with no quieting at all
        pytest.skip(f"torch {torch.__version__}'s profiler logs no profiler_start / stop lines: nothing to quiet")
    assert _kineto_log(OURS) == []
    assert _kineto_log(OURS, KINETO_LOG_LEVEL="0")
