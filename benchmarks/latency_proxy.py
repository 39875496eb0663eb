"""An HTTP proxy in front of an S3 server that adds a fixed latency to every request and counts them.

Moto's S3 server answers in about a millisecond; a real object store takes 20-100 ms a request.
Every request through this proxy waits ``latency_s`` before it is forwarded, and is counted by
method, with the bytes of each answer's body: a benchmark reads how many requests (GETs of
segment data above all) a query made.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["LatencyProxy"]

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization",
               "proxy-authenticate", "expect"}


class LatencyProxy:
    """A proxy on ``127.0.0.1`` (``url``) to ``upstream`` (``host:port``), ``latency_s`` per request."""

    def __init__(self, upstream: str, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s
        self.requests: Counter[str] = Counter()
        self.bytes_out = 0
        """Bytes of answer bodies (what clients downloaded)."""
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
                pass

            def _forward(self) -> None:
                time.sleep(proxy.latency_s)
                body = self._body()
                upstream_conn = http.client.HTTPConnection(upstream, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                upstream_conn.request(self.command, self.path, body=body, headers=headers)
                answer = upstream_conn.getresponse()
                data = answer.read()
                upstream_conn.close()
                self.send_response(answer.status, answer.reason)
                head = self.command == "HEAD"  # its Content-Length is the object's, with no body
                for key, value in answer.getheaders():
                    if key.lower() not in _HOP_BY_HOP and (head or key.lower() != "content-length"):
                        self.send_header(key, value)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                with proxy._lock:
                    proxy.requests[self.command] += 1
                    proxy.bytes_out += len(data)

            def _body(self) -> bytes | None:
                """The request's body, a chunked one decoded (botocore streams uploads so)."""
                if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
                    length = int(self.headers.get("Content-Length") or 0)
                    return self.rfile.read(length) if length else None
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline().strip():  # trailers
                    pass
                return b"".join(chunks)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward  # noqa: N815 (http.server's names)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, name="latency-proxy", daemon=True).start()

    def counts(self) -> tuple[int, int]:
        """(GET requests, bytes downloaded) so far."""
        with self._lock:
            return self.requests["GET"], self.bytes_out

    def stop(self) -> None:
        self._server.shutdown()
