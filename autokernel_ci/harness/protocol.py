"""JSON lines over a pair of pipes between the Evaluator and its worker (stdout stays free for the
candidate's own prints, which go to the worker's log)."""

from __future__ import annotations

import json
import os
import select
import time
from typing import Any

# The worker writes where its verification is (stage, shape, dtype) into this file of its work
# directory, so a timeout can say whether the kernel hung or a long compile sweep ran out of time.
PROGRESS_FILE = "progress.txt"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a verdict or bench result is a few KB; this bounds a runaway


class ChannelClosed(Exception):
    """The other side exited (EOF)."""


class ChannelTimeout(Exception):
    """No complete message before the deadline."""


class Channel:
    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd
        self._buf = b""

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode()
        view = memoryview(data)
        while view:
            written = os.write(self.write_fd, view)
            view = view[written:]

    def recv(self, timeout_s: float | None = None) -> dict[str, Any]:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ChannelTimeout(f"no reply within {timeout_s:.0f} s")
                ready, _, _ = select.select([self.read_fd], [], [], left)
                if not ready:
                    continue
            chunk = os.read(self.read_fd, 1 << 16)
            if not chunk:
                raise ChannelClosed("the other side closed the channel")
            self._buf += chunk
            if len(self._buf) > MAX_MESSAGE_BYTES:
                raise ChannelClosed(f"message larger than {MAX_MESSAGE_BYTES} bytes")
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass
