"""Shared by the tests that signal or kill a real run: how long a runner waits, collecting what a signalled
process said without letting a stuck one outlive the test, and the process tree read from /proc."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

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


def _stat_fields(pid: int | str) -> list[str]:
    """/proc/PID/stat after the command name: [state, parent pid, ...]; OSError once the process is gone."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _process_table() -> dict[int, tuple[int, str]]:
    """{pid: (parent pid, command line)} of every process, read from /proc once."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int(_stat_fields(entry.name)[1])
            table[int(entry.name)] = (parent, (entry / "cmdline").read_text().replace("\0", " "))
        except OSError:
            continue  # exited between the listing and the read
    return table


def children(pid: int) -> dict[int, str]:
    """{child pid: command line} of pid's direct children, whatever session they moved to."""
    return {child: cmdline for child, (parent, cmdline) in _process_table().items() if parent == pid}


def descendants(pid: int) -> set[int]:
    """Every process below pid, whatever session it moved to (one read of /proc, not one per parent)."""
    below: dict[int, list[int]] = {}
    for child, (parent, _) in _process_table().items():
        below.setdefault(parent, []).append(child)
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        frontier = [child for parent in frontier for child in below.get(parent, ()) if child not in found]
        found.update(frontier)
    return found


def alive(pid: int) -> bool:
    try:
        return _stat_fields(pid)[0] != "Z"  # a zombie has exited; only its parent's reaping is left
    except OSError:
        return False
