"""A real OpenAI-compatible chat-completions server on 127.0.0.1 with scripted replies (tests only)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROMPT_TOKENS, COMPLETION_TOKENS = 1200, 800


@dataclass
class Step:
    content: str = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    sleep_s: float = 0.0


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ScriptedLLM:
    def __init__(self) -> None:
        self.script: list[Step] = []
        self.received: list[Received] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"_unparsed": raw.decode(errors="replace")}
                with outer._lock:
                    outer.received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                    step = outer.script.pop(0) if outer.script else Step(status=500, content="script exhausted")
                if step.sleep_s:
                    time.sleep(step.sleep_s)
                if step.status != 200:
                    payload = json.dumps({"error": {"message": step.content or f"status {step.status}",
                                                    "type": "server_error", "code": step.status}}).encode()
                else:
                    payload = json.dumps({
                        "id": f"chatcmpl-{len(outer.received)}", "object": "chat.completion", "created": 0,
                        "model": body.get("model", "test-model"),
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": step.content}}],
                        "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                                  "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS},
                    }).encode()
                try:
                    self.send_response(step.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for k, v in step.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> ScriptedLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
