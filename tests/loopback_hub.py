"""A loopback stand-in of the Hugging Face Hub's upload API for tests (127.0.0.1, never the network).

It answers the calls ``huggingface_hub.HfApi.create_repo`` / ``create_commit`` make for small
files: ``POST /api/repos/create``, ``POST /api/validate-yaml`` (the README's front matter), ``POST /api/models/{repo}/preupload/{rev}`` (every file "regular", so
contents travel base64-encoded in the commit) and ``POST /api/models/{repo}/commit/{rev}`` (NDJSON:
a header line, then one ``file`` line per file). Received files are kept in ``repos[repo_id]``.
"""
from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml


class LoopbackHub:
    def __init__(self, *, require_token: str | None = None) -> None:
        self.repos: dict[str, dict[str, bytes]] = {}
        self.created: list[dict] = []
        self.tokens: list[str | None] = []
        self.validated: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                auth = self.headers.get("Authorization")
                outer.tokens.append(auth)
                if require_token and auth != f"Bearer {require_token}":
                    return self._send(401, {"error": "Invalid credentials in Authorization header"})
                path = self.path.split("?")[0]
                if path == "/api/validate-yaml":  # the README's front matter must parse as a YAML mapping
                    content = json.loads(raw)["content"]
                    outer.validated.append(content)
                    try:
                        meta = yaml.safe_load(content.split("---")[1]) if content.startswith("---") else {}
                    except yaml.YAMLError as e:
                        return self._send(400, {"errors": [{"message": str(e)}]})
                    if not isinstance(meta, dict):
                        return self._send(400, {"errors": [{"message": "metadata is not a mapping"}]})
                    return self._send(200, {"errors": [], "warnings": []})
                if path == "/api/repos/create":
                    body = json.loads(raw)
                    outer.created.append(body)
                    repo = f"{body.get('organization') or 'user'}/{body['name']}"
                    outer.repos.setdefault(repo, {})
                    return self._send(200, {"url": f"{outer.url}/{repo}", "name": repo})
                parts = path.strip("/").split("/")  # api, models, ns, name, action, revision
                if len(parts) >= 6 and parts[:2] == ["api", "models"]:
                    repo, action = f"{parts[2]}/{parts[3]}", parts[4]
                    if action == "preupload":
                        files = json.loads(raw)["files"]
                        return self._send(200, {"files": [{"path": f["path"], "uploadMode": "regular",
                                                           "shouldIgnore": False} for f in files]})
                    if action == "commit":
                        store = outer.repos.setdefault(repo, {})
                        for line in raw.decode().splitlines():
                            item = json.loads(line)
                            if item["key"] == "file":
                                store[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                        return self._send(200, {"commitUrl": f"{outer.url}/{repo}/commit/abc123",
                                                "commitOid": "abc123", "success": True})
                return self._send(404, {"error": f"no route {path}"})

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
