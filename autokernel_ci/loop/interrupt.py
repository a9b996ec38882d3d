"""Stopping the loop on Ctrl-C (SIGINT) or SIGTERM without losing or corrupting the run.

A cancelled GitHub Actions step gets SIGINT, then SIGTERM 7.5 s later, then its process tree is
killed 2.5 s after that; a terminal's Ctrl-C sends SIGINT to the whole foreground group. Python's
default turns SIGINT into a KeyboardInterrupt raised wherever the main thread happens to be: in the
middle of a journal write, or inside a weakref callback where it is printed and dropped (seen: the
loop then ran 20 more experiments, to its cap). Here the first signal only sets a flag and wakes
the loop's wait; the loop stops between experiments, discards the ones in flight, writes its
summary and raises `LoopInterrupted`. A second SIGINT raises KeyboardInterrupt at once.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
RESUME_HINT = "to continue, run the same command again with --resume (its bounds count the whole run)"


class LoopInterrupted(KeyboardInterrupt):
    """The loop stopped on a signal after writing its summary; the journal keeps every finished experiment.

    A KeyboardInterrupt, so no `except Exception` between the loop and the command swallows it and
    `run` never goes on to publish a run its user stopped."""

    def __init__(self, signal_name: str, summary: dict[str, Any], run_dir: Path) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.summary = summary
        self.run_dir = run_dir

    def describe(self, what: str) -> str:
        """One line for the user: what stopped, what is kept, the command that continues."""
        return (f"stopped by {self.signal_name}: {self.summary.get('experiments', 0)} experiment(s) recorded in "
                f"{self.run_dir / 'journal.jsonl'} (any in flight were dropped); {what}")

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number (130 SIGINT, 143 SIGTERM)."""
        return 128 + int(signal.Signals[self.signal_name])


class StopSignals:
    """While entered: SIGINT / SIGTERM set `received` (the signal's name) and make `fileno()` readable.

    Installs nothing outside the main thread (signal.signal would raise there); `received` stays None."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._read_fd = self._write_fd = -1
        self._previous: dict[int, Any] = {}

    def fileno(self) -> int:
        return self._read_fd

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # asked twice: stop now, whatever is running
        self.received = self.received or signal.Signals(signum).name
        try:
            os.write(self._write_fd, b"\0")
        except OSError:  # the pipe is full of earlier wake-ups: the loop is awake anyway
            pass

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
        for fd in (self._read_fd, self._write_fd):
            if fd >= 0:
                os.close(fd)
        self._read_fd = self._write_fd = -1
