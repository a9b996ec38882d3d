"""Shared by the tests that signal a real run: how long a runner waits, and collecting what a signalled
process said without letting a stuck one outlive the test."""

from __future__ import annotations

import os
import signal
import subprocess
import time

# GitHub's runner sends SIGINT, then SIGTERM 7.5 s later; a run must be gone inside that gap.
RUNNER_GRACE_S = 7.5


def collect_after_signal(proc: subprocess.Popen, what: str, timeout_s: float = 60) -> tuple[str, str, float]:
    """(stdout, stderr, seconds to exit) of `proc`, signalled just before the call; a process still running
    after `timeout_s` has its whole group killed and the test fails naming `what`."""
    t0 = time.time()
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"{what} did not stop within {timeout_s:.0f} s of the signal") from None
    return out or "", err or "", time.time() - t0
