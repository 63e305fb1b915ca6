"""nginx as a cheap APNs peer for benchmarks: a C HTTP/2 TLS server that answers 200 to every push and, when
asked, writes one JSON line per push to a record file for the benchmark to read afterwards.

The project's own APNs server (``daemon.apns.server``) validates like Apple and scripts faults, but costs
100-200 µs of Python per push; at the soak's 200,000 tokens that alone would take a core of a 2-core
machine. nginx costs a few µs, so the daemons are what gets measured. It does not check provider tokens
(the tests against the project's server do).

Record lines (``record_path``): ``{"t": <epoch s, ms>, "s": <status>, "u": "/3/device/<token>",
"k": "start|update|end", "ts": "<the aps timestamp, of every push: it names the tick>", "b": "<body or
empty>"}``. To keep the file small the body is written only for
pushes that carry something a benchmark looks at: a ``start`` (an iOS 18 phone learns its channel from it),
an ``end``, or an update whose ``events`` list is not empty (``"events":[]`` is how ``daemon.cricket.payloads`` encodes "no event this tick").

Tokens can be made dead (``set_dead``): a push to one is answered 410 ``{"reason": "Unregistered"}``, as APNs
answers an uninstalled app's token, from a map file nginx reads at start and on ``reload``. ``reload`` (SIGHUP)
also starts fresh workers and lets the old ones close their connections gracefully: over HTTP/2 that is a
GOAWAY to every connected client, which then reconnects, as after Apple's own GOAWAY.

One worker by default (the tests' peer: at most one core); ``workers`` more for a benchmark whose engines
push faster than one nginx worker answers (each push costs it 30-50 µs: TLS, HTTP/2, the body read, the
record line), the connections spread over them by the kernel (``reuseport``).

Needs Debian's ``nginx-light`` (or any nginx with HTTP/2 and SSL); the body is read with the echo module
(``libnginx-mod-http-echo``) when present, else through a proxy hop to a second local server block.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from daemon.store.local import die_with_parent, stop_child
from tests.harness import procfs

ECHO_MODULE = Path("/usr/lib/nginx/modules/ngx_http_echo_module.so")

_CONF = """
{load_module}
worker_processes {workers};
error_log {dir}/error.log warn;
pid {dir}/nginx.pid;
events {{ worker_connections 4096; }}
http {{
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    # nginx 1.22's per-request cost grows with the requests a connection has carried (37 us per push over
    # the first 30,000, 261 us on average over 150,000): a GOAWAY after 10,000 keeps it flat. The sender
    # reconnects, as it does when APNs closes a connection.
    keepalive_requests 10000;
    keepalive_timeout 600s;
    http2_max_concurrent_streams 1000;
    client_body_buffer_size 16k;
    # the dead map's keys are APNs paths ("/3/device/" and 64 hex digits): longer than the default bucket
    # (set before the first map: nginx takes the sizes from there)
    map_hash_bucket_size 128;
    map_hash_max_size 262144;
    map $request_body $interesting {{ "~\\"event\\":\\"end\\"" 1; "~\\"event\\":\\"start\\"" 1; "~\\"events\\":\\[\\]" 0; default 1; }}
    map $interesting $logged_body {{ 1 $request_body; default ""; }}
    map $request_body $kind {{ "~\\"event\\":\\"end\\"" end; "~\\"event\\":\\"start\\"" start; default update; }}
    map $request_uri $apns_dead {{ default 0; include {dir}/dead.map; }}
    map $request_uri $apns_storm {{ default 0; include {dir}/storm.map; }}
    map $request_body $stamp {{ "~\\"timestamp\\":(?<ts>[0-9]+)" $ts; default ""; }}
    log_format rec escape=json '{{"t":$msec,"s":$status,"u":"$request_uri","k":"$kind","ts":"$stamp","b":"$logged_body"}}';
    {access_log}
    server {{
        listen 127.0.0.1:{port} ssl http2{reuseport};
        ssl_certificate {dir}/cert.pem;
        ssl_certificate_key {dir}/key.pem;
        location / {{
            if ($apns_storm = 429) {{ return 429 '{{"reason":"TooManyRequests"}}'; }}
            if ($apns_storm = 500) {{ return 500 '{{"reason":"InternalServerError"}}'; }}
            if ($apns_dead) {{ return 410 '{{"reason":"Unregistered"}}'; }}
            {answer}
        }}
    }}
    {backend}
}}
"""

# Without the echo module nginx only reads a body it proxies: hop to a second server block answering 200.
_BACKEND = """
    upstream answer200 {{ server 127.0.0.1:{port}; keepalive 32; }}
    server {{ listen 127.0.0.1:{port}; access_log off; location / {{ return 200; }} }}
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class NginxApns:
    """``start()`` → serving; ``url``/``ca_file`` for the daemons; ``records()`` reads the record file."""

    def __init__(
        self, *, record_path: Path | None = None, workdir: Path | None = None, workers: int = 1
    ) -> None:
        self.record_path = record_path
        self.workers = workers
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="sightscreen-nginx-"))
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.dead: set[str] = set()
        self._storm: int | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> str:
        return str(self.workdir / "ca.pem")

    def start(self, timeout: float = 10.0) -> NginxApns:
        import trustme

        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(nginx).exists():
            raise RuntimeError("nginx is not installed (Debian: apt-get install nginx-light)")
        d = self.workdir
        d.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        cert.private_key_pem.write_to_path(str(d / "key.pem"))
        cert.cert_chain_pems[0].write_to_path(str(d / "cert.pem"))
        ca.cert_pem.write_to_path(str(d / "ca.pem"))
        self.port = _free_port()
        logging = self.record_path is not None
        echo = ECHO_MODULE.exists()
        if not logging:
            answer, backend = "return 200;", ""
        elif echo:
            answer, backend = 'echo_read_request_body; echo_status 200; echo -n "";', ""
        else:
            backend_port = _free_port()
            answer = 'proxy_http_version 1.1; proxy_set_header Connection ""; proxy_pass http://answer200;'
            backend = _BACKEND.format(port=backend_port)
        conf = _CONF.format(
            dir=d,
            port=self.port,
            workers=self.workers,
            # several workers: the kernel spreads the connections over them (each its own listening socket)
            reuseport=" reuseport" if self.workers > 1 else "",
            load_module=f"load_module {ECHO_MODULE};" if logging and echo else "",
            access_log=f"access_log {self.record_path} rec buffer=256k flush=1s;"
            if logging
            else "access_log off;",
            answer=answer,
            backend=backend,
        )
        self._write_dead()
        (d / "nginx.conf").write_text(conf)
        self.proc = subprocess.Popen(
            [nginx, "-p", str(d), "-c", str(d / "nginx.conf"), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"nginx did not start; see {d}/error.log") from None
                time.sleep(0.05)

    def set_dead(self, tokens: set[str] | frozenset[str]) -> None:
        """Answer pushes to ``tokens`` (and to those already dead) with 410 Unregistered from now on: written
        before ``start``, or applied at once by a ``reload`` while nginx runs."""
        if not set(tokens) - self.dead:
            return
        self.dead |= set(tokens)
        self._write_dead()
        if self.proc is not None:
            self.reload()

    def storm(self, status: int | None) -> None:
        """Answer every push ``status`` (429 TooManyRequests or 500 InternalServerError) from now on, or as
        usual again with None: applied by a ``reload`` while nginx runs (its connections get a GOAWAY)."""
        if status not in (None, 429, 500):
            raise ValueError(f"storm: 429, 500 or None, got {status!r}")
        self._storm = status
        self._write_dead()
        if self.proc is not None:
            self.reload()

    def reload(self) -> None:
        """SIGHUP: nginx reads its configuration (the dead tokens) again with fresh workers; the old workers
        send GOAWAY on their HTTP/2 connections and close them once their streams are answered."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGHUP)

    def _write_dead(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        lines = "".join(f'"/3/device/{token}" 1;\n' for token in sorted(self.dead))
        tmp = self.workdir / "dead.map.tmp"
        tmp.write_text(lines)
        tmp.replace(self.workdir / "dead.map")
        storm = "" if self._storm is None else f'"~." {self._storm};\n'  # a regex: every path
        tmp = self.workdir / "storm.map.tmp"
        tmp.write_text(storm)
        tmp.replace(self.workdir / "storm.map")

    def worker_pids(self) -> list[int]:
        """The running workers' process ids (the master's children, read from ``/proc``)."""
        return [] if self.proc is None else procfs.children(self.proc.pid)

    def cpu_s(self) -> float | None:
        """CPU seconds (user and system) of the master and its running workers; None when not running."""
        return None if self.proc is None else procfs.tree_cpu_s(self.proc.pid)

    def stop(self) -> None:
        """Graceful stop (SIGQUIT): nginx flushes its buffered record lines before it exits."""
        stop_child(self.proc, signal.SIGQUIT, timeout=15)
        self.proc = None

    def records(self) -> Iterator[dict[str, Any]]:
        """Every recorded push as ``{"time", "status", "token", "kind", "stamp", "payload"}`` (stamp: the
        push's aps timestamp, which names the tick; payload None when not logged), in the file's order. Read
        after ``stop()`` so every buffered line is there."""
        if self.record_path is None or not self.record_path.exists():
            return
        with self.record_path.open("rb") as f:
            for line in f:
                record = _record(line)
                if record is not None:
                    yield record

    def records_since(self, offset: int) -> tuple[list[dict[str, Any]], int]:
        """The records written from byte ``offset`` on (complete lines only: nginx flushes its buffer at least
        once a second while running), and the offset to read from next time."""
        if self.record_path is None or not self.record_path.exists():
            return [], offset
        with self.record_path.open("rb") as f:
            f.seek(offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        records = [record for line in chunk[:end].splitlines() if (record := _record(line)) is not None]
        return records, offset + end

    def starts_since(self, offset: int) -> tuple[list[dict[str, Any]], int, float | None]:
        """The push-to-starts recorded from byte ``offset`` on (complete lines only: nginx flushes its buffer
        at least once a second while running), the offset to read from next time, and the time of the last
        line read (None when there was none): every push answered before it has been read."""
        if self.record_path is None or not self.record_path.exists():
            return [], offset, None
        with self.record_path.open("rb") as f:
            f.seek(offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        lines = chunk[:end].splitlines()
        starts = [
            record for line in lines if b'"k":"start"' in line and (record := _record(line)) is not None
        ]
        last = _record(lines[-1]) if lines else None
        return starts, offset + end, None if last is None else last["time"]


def _record(line: bytes) -> dict[str, Any] | None:
    """One record line as the benchmarks read it; None for a line cut by a crash (nothing to count)."""
    try:
        r = json.loads(line)
    except ValueError:
        return None
    body = r.get("b") or ""
    try:
        payload = json.loads(body) if body else None
    except ValueError:
        payload = None  # a body cut short: the client went away mid-request (status 499)
    return {
        "time": float(r["t"]),
        "status": int(r["s"]),
        "token": str(r["u"]).rsplit("/", 1)[-1],
        "kind": r.get("k"),
        "stamp": int(r["ts"]) if r.get("ts") else None,
        "payload": payload,
    }
