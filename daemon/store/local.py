"""moto's DynamoDB server on loopback, single-threaded, as a child process.

The stock ``moto_server`` and ``ThreadedMotoServer`` serve each request on its own thread and lose
conditional updates when clients write at the same time (see the project's DynamoDB notes, section 5). We
run the same WSGI app with ``threaded=False`` so requests are serialised, which makes conditional writes
linearizable - what the lock and fencing tests need. It is a separate process so that the daemon's trio
loop and the server never share a GIL-bound thread pool.

Used by ``sightscreen demo`` and by the test session; never by production.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

_SERVER_CODE = r"""
import os, sys, threading, time

# Exit when the process that started us is gone (a test run or benchmark killed from outside). Watching the
# parent pid works whichever thread started us; PR_SET_PDEATHSIG would fire when that *thread* exits.
_parent = os.getppid()
def _watch_parent():
    while os.getppid() == _parent:
        time.sleep(0.5)
    os._exit(0)
threading.Thread(target=_watch_parent, daemon=True).start()
from werkzeug.serving import run_simple, WSGIRequestHandler
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from moto.server import MotoRequestHandler

class Quiet(MotoRequestHandler):
    # One thread serves everyone: a client that sent half a request and went quiet (a link blackholed
    # mid-request by the fault proxy, a process stopped mid-send) would hold it for ever. Cut it off after
    # 3 s of silence, as a load balancer would.
    timeout = 3

    def log_request(self, *a, **k):
        pass

run_simple(sys.argv[1], int(sys.argv[2]), DomainDispatcherApplication(create_backend_app),
           threaded=False, request_handler=Quiet)
"""


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the process that started it dies (Linux), so a test run or a
    benchmark killed from outside never leaves a daemon behind. Only for children started from a thread that
    lives as long as the process (the kernel ties PR_SET_PDEATHSIG to the forking thread)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def stop_child(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, timeout: float = 5.0) -> None:
    """Ask a child to stop (``sig``), give it ``timeout`` seconds, then kill it; reaped either way."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class MotoServer:
    """A single-threaded moto DynamoDB server. ``start()`` returns once it answers; ``stop()`` kills it."""

    host: str = "127.0.0.1"
    port: int = 0
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> MotoServer:
        if not self.port:
            self.port = free_port(self.host)
        env = dict(os.environ)
        env.setdefault("AWS_ACCESS_KEY_ID", "testing")
        env.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER_CODE, self.host, str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # Ctrl-C in a terminal goes to our process, which stops the server itself
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server exited with code {self.proc.returncode} before answering")
            try:
                with urllib.request.urlopen(f"{self.url}/moto-api/", timeout=1):
                    return self
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"moto server did not answer on {self.url} within {timeout}s")

    def reset(self) -> None:
        """Wipe every table (between tests)."""
        req = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(req, timeout=10):
            pass

    def stop(self) -> None:
        stop_child(self.proc)
        self.proc = None

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
