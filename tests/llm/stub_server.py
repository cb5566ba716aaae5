"""A local OpenAI-compatible chat server for tests: answers every request with the next of its
replies (the last one repeats) and counts what it receives.

A reply is the text, or a dict: ``content``, ``finish_reason`` (``"length"``: cut off at max_tokens),
``status`` (an HTTP error, e.g. 401 or 500, with ``message``) and ``sleep`` (seconds before answering)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StubServer:
    """``with StubServer(["..."]) as s:`` serves ``s.api_base`` (``http://127.0.0.1:PORT/v1``)."""

    def __init__(self, replies: list[str | dict]):
        self.replies = list(replies)
        self.requests: list[dict] = []
        """The JSON bodies of the chat requests received, in order."""
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test's output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with stub._lock:
                    stub.requests.append(body)
                    action = stub.replies[min(len(stub.requests), len(stub.replies)) - 1]
                action = action if isinstance(action, dict) else {"content": action}
                time.sleep(action.get("sleep", 0))
                status = action.get("status", 200)
                if status != 200:
                    reply = {"error": {"message": action.get("message", f"stub error {status}"), "code": status}}
                else:
                    reply = {"id": f"stub-{len(stub.requests)}", "object": "chat.completion",
                             "created": int(time.time()), "model": body.get("model", "stub"),
                             "choices": [{"index": 0, "finish_reason": action.get("finish_reason", "stop"),
                                          "message": {"role": "assistant", "content": action.get("content")}}],
                             "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}}
                data = json.dumps(reply).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting (a timeout test)
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.api_base = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> "StubServer":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
