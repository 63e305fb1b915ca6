"""dynalite (npm) as a fast local DynamoDB peer for the soak benchmark.

moto's server answers a Query of 10,000 Live Activity sessions in ~5 s (its response serialiser costs
~0.4 ms per item) and runs on one thread, so at the soak's 200,000 tokens moto, not the daemons, would be
measured. dynalite (node, LevelDB in memory) answers the same Query in ~0.4 s and is linearizable under
concurrent writers (spec/dynamodb.md §2, §5). Its gaps, and what the project does about them:

- no UpdateTimeToLive: ``create_tables`` logs ``dynamodb_ttl_unsupported`` and goes on (every read
  filters expired items; nothing relies on TTL deletion);
- ``ReturnValuesOnConditionCheckFailure`` ignored: the repositories read the item instead;
- no transactions or streams (the daemon uses neither);
- a client that goes away mid-request (a daemon killed by the soak) makes dynalite 4.0.0 throw from its
  request error handler and exit: ``LAUNCHER`` starts it with a handler that logs that one error and goes
  on (anything else still ends the process).

The tests keep running against moto (the project's reference peer); dynalite is a benchmark option only.
It is installed from the npm registry into ``~/.cache/sightscreen/dynalite`` on first use (node >= 20).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from daemon.store.local import die_with_parent, free_port, stop_child

VERSION = "4.0.0"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sightscreen" / "dynalite"


LAUNCHER = """\
// sightscreen: dynalite with a client that vanishes mid-request logged, not fatal (see dynalite.py)
process.on('uncaughtException', function (err) {
  if (err && (err.code === 'ECONNRESET' || err.message === 'aborted')) {
    console.error('dynalite: a client went away mid-request (' + err.message + '); going on')
    return
  }
  console.error(err)
  process.exit(1)
})
var argv = {createTableMs: 0, deleteTableMs: 0, updateTableMs: 0}
var server = require('dynalite')(argv).listen(+process.argv[3], process.argv[2], function () {
  console.log('dynalite listening at http://' + process.argv[2] + ':' + server.address().port)
})
"""


def install(cache: Path = CACHE) -> Path:
    """The path of dynalite's cli.js, installing the pinned version with npm when it is not there yet."""
    cli = cache / "node_modules" / "dynalite" / "cli.js"
    if cli.exists():
        return cli
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise RuntimeError("dynalite needs node >= 20 and npm (Debian: apt-get install nodejs npm)")
    cache.mkdir(parents=True, exist_ok=True)
    if not (cache / "package.json").exists():
        (cache / "package.json").write_text('{"name": "sightscreen-dynalite", "private": true}\n')
    subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", f"dynalite@{VERSION}"],
        cwd=cache,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    if not cli.exists():
        raise RuntimeError(f"npm install dynalite@{VERSION} finished but {cli} is missing")
    return cli


class DynaliteServer:
    """In-memory dynalite on loopback. ``start()`` returns once it answers; ``stop()`` ends it."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, *, log_path: Path | None = None, heap_mb: int = 8192
    ) -> None:
        self.host = host
        self.port = port
        # node's default heap limit (~2-4 GB) is too small for 400,000 items held in memory
        self.heap_mb = heap_mb
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> DynaliteServer:
        cli = install()
        launcher = cli.parents[2] / "sightscreen-dynalite.js"  # beside node_modules: require() finds it
        launcher.write_text(LAUNCHER)
        if not self.port:
            self.port = free_port(self.host)
        log: IO[bytes] | None = self.log_path.open("ab") if self.log_path is not None else None
        try:
            self.proc = subprocess.Popen(
                [
                    shutil.which("node") or "node",
                    f"--max-old-space-size={self.heap_mb}",
                    str(launcher),
                    self.host,
                    str(self.port),
                ],
                stdout=subprocess.DEVNULL if log is None else log,
                stderr=subprocess.DEVNULL if log is None else log,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
            )
        finally:
            if log is not None:
                log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dynalite exited with code {self.proc.returncode} before answering")
            try:
                with urllib.request.urlopen(self.url, timeout=1):
                    return self
            except urllib.error.HTTPError:
                return self  # it answered (400 to a bare GET): up
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"dynalite did not answer on {self.url} within {timeout}s")

    def stop(self) -> None:
        stop_child(self.proc)
        self.proc = None
