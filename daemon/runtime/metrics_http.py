"""The Prometheus scrape endpoint: a minimal HTTP/1.1 server answering ``GET /metrics`` with the
registry's text exposition (``daemon.metrics.render``), bounded in clients and time per client."""

from __future__ import annotations

import trio

from daemon.config.models import parse_listen
from daemon.logs import get_logger
from daemon.runtime.accept import ACCEPT_RETRY_S, ACCEPT_TRANSIENT

log = get_logger("admin")

_HTTP_HEAD_MAX = 8192
_PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _http_response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def metrics_http_response(request_head: bytes) -> bytes:
    """The whole HTTP answer to one request head: GET/HEAD /metrics gets the registry, anything else an error."""
    from daemon.metrics import render

    request_line = request_head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = request_line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return _http_response("400 Bad Request", b"bad request\n")
    method, target = parts[0], parts[1].split("?", 1)[0]
    if target not in ("/metrics", "/"):
        return _http_response("404 Not Found", b"only /metrics is served here\n")
    if method not in ("GET", "HEAD"):
        return _http_response("405 Method Not Allowed", b"GET /metrics\n")
    response = _http_response("200 OK", render(), _PROMETHEUS_TYPE)
    return response.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n" if method == "HEAD" else response


class MetricsHttpServer:
    """``GET /metrics`` over HTTP/1.1 for a Prometheus scraper (the admin socket cannot be scraped).

    One request per connection, then close; a client that does not send its request head within
    ``client_timeout_s`` or does not read the answer within it is dropped; at most ``max_clients`` at once.
    """

    def __init__(self, listen: str, *, client_timeout_s: float = 10.0, max_clients: int = 16) -> None:
        self.host, self.port = parse_listen(listen, any_port=True)
        self.client_timeout_s = client_timeout_s
        self._slots = trio.Semaphore(max_clients)  # released by the connection's own task

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        # port 0 means "any free port": report the one the kernel chose (tests, and the log line)
        self.port = listeners[0].socket.getsockname()[1]
        log.info("metrics_http_listening", host=self.host, port=self.port)
        try:
            async with trio.open_nursery() as nursery:
                task_status.started(self.port)
                for listener in listeners:
                    nursery.start_soon(self._accept_loop, listener, nursery)
        finally:
            with trio.CancelScope(shield=True):
                for listener in listeners:
                    await listener.aclose()

    run = serve

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        while True:
            # Waiting for a slot before accepting: past max_clients, newcomers wait in the kernel's backlog.
            await self._slots.acquire()
            try:
                stream = await listener.accept()
            except OSError as exc:
                self._slots.release()
                if exc.errno in ACCEPT_TRANSIENT:
                    await trio.sleep(ACCEPT_RETRY_S)
                    continue
                raise
            except BaseException:
                self._slots.release()
                raise
            nursery.start_soon(self._serve_one, stream)

    async def _serve_one(self, stream: trio.SocketStream) -> None:
        try:
            with trio.move_on_after(self.client_timeout_s):
                head = bytearray()
                while b"\r\n\r\n" not in head and b"\n\n" not in head and len(head) <= _HTTP_HEAD_MAX:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        break
                    head += chunk
                if len(head) > _HTTP_HEAD_MAX:
                    answer = _http_response(
                        "431 Request Header Fields Too Large", b"request head too large\n"
                    )
                else:
                    answer = metrics_http_response(bytes(head))
                await stream.send_all(answer)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self._slots.release()
            with trio.CancelScope(shield=True):
                await stream.aclose()
