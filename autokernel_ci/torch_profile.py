"""torch.profiler.profile, as every profile of ours (the profiler, the harness's launch count, the end-to-end op
count) opens it: one profile a block, without torch's false warning about cycles."""

from __future__ import annotations

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


@contextmanager
def torch_profile(activities: Sequence[torch.profiler.ProfilerActivity], **options: Any) -> Iterator[Any]:
    """Yield a started torch.profiler.profile(activities, **options); the block's own warnings go out as usual."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=FALSE_CYCLE_WARNING, category=UserWarning)
        with torch.profiler.profile(activities=list(activities), **options) as prof:
            yield prof
