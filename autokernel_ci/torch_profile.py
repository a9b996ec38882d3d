"""torch.profiler.profile, as every profile of ours (the profiler, the harness's launch count, the end-to-end op
count) opens it: one profile a block, without Kineto's own log lines or torch's false warning about cycles."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

# torch 2.10-2.11 print this UserWarning (with site-packages' path) on the first schedule-less profile of a process,
# where no cycle exists and nothing is cleared (fixed upstream in torch 2.12, pytorch#180387); it stood on line 2
# of docs/examples/h200-llama/run/run.log. torch words it "cycle.Only" (2.11) or "cycle. Only" (2.13): matched on
# the sentence both share.
FALSE_CYCLE_WARNING = r"Warning: Profiler clears events at the end of each cycle"
# Kineto (torch's profiler) logs to stderr at a level it reads once a process, when the first profile starts: torch
# 2.13 writes "USDT: ... profiler_start / profiler_stop" on every profile (6 lines before the first result of
# `autokernel-ci run --example llama --local`). 6 is above its last level (5 still logs them). A level the user set
# wins; harness workers inherit it (sandbox.KEEP_NAMES).
PROFILER_LOG_ENV, PROFILER_LOG_QUIET = "KINETO_LOG_LEVEL", "6"


@contextmanager
def torch_profile(activities: Sequence[torch.profiler.ProfilerActivity], **options: Any) -> Iterator[Any]:
    """Yield a started torch.profiler.profile(activities, **options); the block's own warnings go out as usual."""
    os.environ.setdefault(PROFILER_LOG_ENV, PROFILER_LOG_QUIET)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=FALSE_CYCLE_WARNING, category=UserWarning)
        with torch.profiler.profile(activities=list(activities), **options) as prof:
            yield prof
