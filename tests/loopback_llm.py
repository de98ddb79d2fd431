"""A loopback OpenAI-compatible HTTP server for tests (127.0.0.1, an ephemeral port; never the network)."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackServer:
    """Answers POST /v1/chat/completions with ``reply(body, attempt) -> (status, payload[, headers])``.

    ``trickle``: seconds between the bytes of each response body (a slow-loris server); ``bodies`` and
    ``headers`` record what was received, in arrival order."""

    def __init__(self, reply, *, trickle: float | None = None):
        self.reply = reply
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.released = threading.Event()  # set on close: replies that wait on it give up
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                outer.headers.append(dict(self.headers))
                status, payload, *extra = outer.reply(body, len(outer.bodies))
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (extra[0] if extra else {}).items():
                        self.send_header(k, str(v))
                    self.end_headers()
                    if trickle is None:
                        self.wfile.write(data)
                    else:
                        for i in range(len(data)):
                            self.wfile.write(data[i:i + 1])
                            self.wfile.flush()
                            if outer.released.wait(trickle):
                                return
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def chat(text: str) -> dict:
    """A chat-completions body answering ``text``."""
    return {"choices": [{"message": {"role": "assistant", "content": text}}]}


def wait_until(cond, seconds: float = 60.0, step: float = 0.05) -> bool:
    """Poll ``cond()`` until it is true or ``seconds`` pass (a guard against hangs, not a timing)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return bool(cond())
