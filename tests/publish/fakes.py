"""Two real servers on 127.0.0.1 for the flow tests.

* GitServer: git's smart HTTP protocol served by git's own `git http-backend` (CGI) behind a small
  Python HTTP server, so GITHUB_SERVER_URL is honoured exactly as on github.com or an Enterprise
  Server. It refuses any request without `Authorization: basic x-access-token:<token>` (401 with a
  WWW-Authenticate challenge, as GitHub does), which proves the token travels as a header.
* GitHubAPI: answers the REST calls PyGithub makes for the bot (repository, pulls, issue comments,
  reactions, collaborator permission, labels, /user) from in-memory state, and rejects malformed
  requests with GitHub's own error bodies: unknown route or method 404, no/bad auth 401, body not
  JSON 400, missing or invalid fields 422, a second open PR for the same head 422.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

DOCS = "https://docs.github.com/rest"
REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")


class _Server:
    def __init__(self, handler_cls: type) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_cls)
        self.httpd.owner = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# -- git smart HTTP ---------------------------------------------------------------------------------
class _GitHandler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def _serve(self) -> None:
        owner: GitServer = self.server.owner  # type: ignore[attr-defined]
        owner.requests.append({"method": self.command, "path": self.path, "auth": self.headers.get("Authorization")})
        expected = "basic " + base64.b64encode(f"x-access-token:{owner.token}".encode()).decode()
        if (self.headers.get("Authorization") or "").lower() != expected.lower():
            owner.rejected += 1
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="GitHub"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self._body()
        split = urlsplit(self.path)
        env = {
            "GIT_PROJECT_ROOT": str(owner.root), "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": split.path,
            "QUERY_STRING": split.query, "REQUEST_METHOD": self.command, "REMOTE_USER": "x-access-token",
            "REMOTE_ADDR": "127.0.0.1", "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)), "PATH": "/usr/bin:/bin:/usr/local/bin",
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        proc = subprocess.run(["git", "http-backend"], input=body, capture_output=True, env=env, check=False)
        head, _, payload = proc.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = proc.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode(errors="replace").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    do_GET = _serve
    do_POST = _serve


class GitServer(_Server):
    """Serves bare repositories under `root` as {url}/{owner}/{name}.git."""

    def __init__(self, root: Path, token: str) -> None:
        super().__init__(_GitHandler)
        self.root, self.token = root, token
        self.requests: list[dict[str, Any]] = []
        self.rejected = 0


# -- GitHub REST API ----------------------------------------------------------------------------------
class _APIError(Exception):
    def __init__(self, status: int, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        self.status, self.message, self.errors = status, message, errors


class _APIHandler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def _handle(self) -> None:
        api: GitHubAPI = self.server.owner  # type: ignore[attr-defined]
        split = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        entry = {"method": self.command, "path": split.path, "query": split.query,
                 "auth": self.headers.get("Authorization"), "body": raw.decode(errors="replace")}
        api.requests.append(entry)
        try:
            auth = self.headers.get("Authorization")
            if not auth:
                raise _APIError(401, "Requires authentication")
            scheme, _, value = auth.partition(" ")
            if scheme.lower() not in ("token", "bearer") or value != api.token:
                raise _APIError(401, "Bad credentials")
            body = None
            if self.command in ("POST", "PATCH", "PUT"):
                try:
                    body = json.loads(raw or b"null")
                except json.JSONDecodeError:
                    raise _APIError(400, "Problems parsing JSON") from None
                if not isinstance(body, dict):
                    raise _APIError(400, "Problems parsing JSON")
            status, payload = api.route(self.command, split.path, parse_qs(split.query), body)
        except _APIError as exc:
            status = exc.status
            payload = {"message": exc.message, "documentation_url": DOCS, "status": str(exc.status)}
            if exc.errors:
                payload["errors"] = exc.errors
            api.errors.append({**entry, "status": status, "message": exc.message})
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _handle


class GitHubAPI(_Server):
    def __init__(self, repo: str, token: str, *, default_branch: str = "main") -> None:
        super().__init__(_APIHandler)
        self.repo, self.token, self.default_branch = repo, token, default_branch
        self.owner_login = repo.split("/")[0]
        self.pulls: list[dict[str, Any]] = []
        self.comments: list[dict[str, Any]] = []
        self.reactions: list[dict[str, Any]] = []
        self.labels: dict[int, list[str]] = {}
        self.permissions: dict[str, str] = {}
        self.requests: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        self._next_id = 1000
        self.lock = threading.Lock()

    # -- state helpers the tests use ---------------------------------------------------------------
    def _id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _repo_json(self, full_name: str | None = None) -> dict[str, Any]:
        full_name = full_name or self.repo
        owner, name = full_name.split("/")
        return {"id": 1, "name": name, "full_name": full_name, "owner": {"login": owner, "id": 1, "type": "User"},
                "default_branch": self.default_branch, "private": False,
                "url": f"{self.url}/repos/{full_name}", "html_url": f"https://example.invalid/{full_name}"}

    def add_pull(self, *, number: int, head_ref: str, head_sha: str, head_repo: str | None = None,
                 body: str = "", base_ref: str = "main", base_sha: str = "0" * 40) -> dict[str, Any]:
        pr = {"number": number, "state": "open", "title": f"PR {number}", "body": body,
              "head": {"ref": head_ref, "sha": head_sha, "label": f"{self.owner_login}:{head_ref}",
                       "repo": self._repo_json(head_repo) if head_repo != "" else None},
              "base": {"ref": base_ref, "sha": base_sha, "repo": self._repo_json()}}
        self.pulls.append(pr)
        return pr

    def _pull_json(self, pr: dict[str, Any]) -> dict[str, Any]:
        n = pr["number"]
        return {**pr, "id": n, "url": f"{self.url}/repos/{self.repo}/pulls/{n}",
                "html_url": f"https://example.invalid/{self.repo}/pull/{n}",
                "issue_url": f"{self.url}/repos/{self.repo}/issues/{n}", "user": {"login": "autokernel-ci[bot]"}}

    def _comment_json(self, c: dict[str, Any]) -> dict[str, Any]:
        return {**c, "url": f"{self.url}/repos/{self.repo}/issues/comments/{c['id']}",
                "html_url": f"https://example.invalid/{self.repo}/pull/{c['issue']}#issuecomment-{c['id']}",
                "user": {"login": c.get("login", "github-actions[bot]"), "type": "Bot"}}

    def add_comment(self, issue: int, body: str, login: str = "octocat") -> dict[str, Any]:
        c = {"id": self._id(), "issue": issue, "body": body, "login": login}
        self.comments.append(c)
        return c

    def open_pulls(self) -> list[dict[str, Any]]:
        return [p for p in self.pulls if p["state"] == "open"]

    def bot_comments(self, marker: str) -> list[dict[str, Any]]:
        return [c for c in self.comments if marker in c["body"]]

    # -- routing --------------------------------------------------------------------------------------
    def route(self, method: str, path: str, query: dict[str, list[str]],
              body: dict[str, Any] | None) -> tuple[int, Any]:
        with self.lock:
            return self._route(method, path, query, body)

    def _route(self, method, path, query, body):
        prefix = f"/repos/{self.repo}"
        if method == "GET" and path == "/user":
            return 200, {"login": "autokernel-ci[bot]", "id": 7, "type": "Bot"}
        if not path.startswith(prefix + "/") and path != prefix:
            raise _APIError(404, "Not Found")
        rest = path[len(prefix):]
        if method == "GET" and rest == "":
            return 200, self._repo_json()
        if rest == "/pulls" and method == "GET":
            state = query.get("state", ["open"])[0]
            head = query.get("head", [None])[0]
            out = [p for p in self.pulls if state == "all" or p["state"] == state]
            if head:
                owner, _, ref = head.partition(":")
                out = [p for p in out if p["head"]["ref"] == ref and owner == self.owner_login]
            return 200, [self._pull_json(p) for p in out]
        if rest == "/pulls" and method == "POST":
            missing = [f for f in ("title", "head", "base") if not isinstance((body or {}).get(f), str)]
            if missing:
                raise _APIError(422, "Validation Failed",
                                [{"resource": "PullRequest", "field": f, "code": "missing_field"} for f in missing])
            head = body["head"].split(":")[-1]
            if any(p["head"]["ref"] == head and p["state"] == "open" for p in self.pulls):
                raise _APIError(422, "Validation Failed", [{"resource": "PullRequest", "code": "custom",
                                "message": f"A pull request already exists for {self.owner_login}:{head}."}])
            number = max([p["number"] for p in self.pulls] + [0]) + 1
            pr = self.add_pull(number=number, head_ref=head, head_sha="", body=body.get("body") or "",
                               base_ref=body["base"], head_repo=None)
            pr["title"] = body["title"]
            return 201, self._pull_json(pr)
        m = re.fullmatch(r"/pulls/(\d+)", rest)
        if m:
            pr = self._pull(int(m.group(1)))
            if method == "GET":
                return 200, self._pull_json(pr)
            if method == "PATCH":
                unknown = set(body or {}) - {"title", "body", "state", "base", "maintainer_can_modify"}
                if unknown:
                    raise _APIError(422, "Validation Failed", [{"field": f, "code": "invalid"} for f in unknown])
                pr.update({k: v for k, v in (body or {}).items() if k in ("title", "body", "state")})
                return 200, self._pull_json(pr)
        m = re.fullmatch(r"/issues/(\d+)", rest)
        if m and method == "GET":
            n = int(m.group(1))
            pr = next((p for p in self.pulls if p["number"] == n), None)
            issue = {"number": n, "id": n, "state": "open", "title": "t", "body": "",
                     "url": f"{self.url}{prefix}/issues/{n}", "html_url": f"https://example.invalid/{self.repo}/{n}"}
            if pr:
                issue["pull_request"] = {"url": f"{self.url}{prefix}/pulls/{n}"}
            return 200, issue
        m = re.fullmatch(r"/issues/(\d+)/comments", rest)
        if m:
            n = int(m.group(1))
            if method == "GET":
                return 200, [self._comment_json(c) for c in self.comments if c["issue"] == n]
            if method == "POST":
                if not isinstance((body or {}).get("body"), str) or not body["body"]:
                    raise _APIError(422, "Validation Failed", [{"field": "body", "code": "missing_field"}])
                c = self.add_comment(n, body["body"], login="github-actions[bot]")
                return 201, self._comment_json(c)
        m = re.fullmatch(r"/issues/(\d+)/labels", rest)
        if m and method == "POST":
            labels = (body or {}).get("labels")
            if not isinstance(labels, list):
                raise _APIError(422, "Validation Failed", [{"field": "labels", "code": "invalid"}])
            self.labels.setdefault(int(m.group(1)), []).extend(labels)
            return 200, [{"name": name} for name in self.labels[int(m.group(1))]]
        m = re.fullmatch(r"/issues/comments/(\d+)", rest)
        if m:
            c = self._comment(int(m.group(1)))
            if method == "GET":
                return 200, self._comment_json(c)
            if method == "PATCH":
                if not isinstance((body or {}).get("body"), str):
                    raise _APIError(422, "Validation Failed", [{"field": "body", "code": "missing_field"}])
                c["body"] = body["body"]
                return 200, self._comment_json(c)
        m = re.fullmatch(r"/issues/comments/(\d+)/reactions", rest)
        if m and method == "POST":
            self._comment(int(m.group(1)))
            content = (body or {}).get("content")
            if content not in REACTIONS:
                raise _APIError(422, "Validation Failed", [{"field": "content", "code": "invalid"}])
            r = {"id": self._id(), "comment": int(m.group(1)), "content": content,
                 "user": {"login": "github-actions[bot]"}}
            self.reactions.append(r)
            return 201, r
        m = re.fullmatch(r"/collaborators/([^/]+)/permission", rest)
        if m and method == "GET":
            user = m.group(1)
            perm = self.permissions.get(user, "read")
            role = {"write": "write", "maintain": "maintain", "admin": "admin"}.get(perm, perm)
            return 200, {"permission": "write" if perm == "maintain" else perm, "role_name": role,
                         "user": {"login": user}}
        raise _APIError(404, "Not Found")

    def _pull(self, n: int) -> dict[str, Any]:
        pr = next((p for p in self.pulls if p["number"] == n), None)
        if pr is None:
            raise _APIError(404, "Not Found")
        return pr

    def _comment(self, cid: int) -> dict[str, Any]:
        c = next((c for c in self.comments if c["id"] == cid), None)
        if c is None:
            raise _APIError(404, "Not Found")
        return c
