"""The API role as its own ``sightscreen run`` process (``roles = ["api"]``), as the region's template runs
it: its own credentials (so the test DynamoDB attributes its calls to the API role), a TOML file an operator
could have written, and a wait until ``/readyz`` answers 200. Used by the API role's tour
(tests/deploy/test_aws_api_role.py) and the cost benchmark (bench/aws_cost.py). Nothing here is shipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import trio

from daemon.store.local import die_with_parent, free_port
from tests.harness.cluster import toml_dumps
from tests.harness.dynamodb_iam import role_credentials


class ApiProcess:
    def __init__(
        self,
        workdir: Path,
        *,
        dynamodb_url: str,
        table_prefix: str,
        issuer: Any,
        sock_dir: Path | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "api.log"
        self.config_path = workdir / "api.toml"
        config: dict[str, dict[str, Any]] = {
            "instance": {"id": "api-1", "roles": ["api"]},
            "dynamodb": {"endpoint_url": dynamodb_url, "table_prefix": table_prefix},
            "api": {"listen": f"127.0.0.1:{self.port}"},
            "auth": {"issuer": issuer.issuer, "jwks_url": issuer.jwks_url, "client_ids": [issuer.client_id]},
            # AF_UNIX paths are short: a test's tmp_path may be too long for one
            "admin": {"socket_path": str((sock_dir or workdir) / "api.sock")},
            "logging": {"format": "json"},
        }
        self.config_path.write_text(toml_dumps(config))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ApiProcess:
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "daemon", "run", "--config", str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(os.environ, PYTHONUNBUFFERED="1", **role_credentials("api")),
                preexec_fn=die_with_parent,
            )
        return self

    def log_tail(self) -> str:
        return self.log_path.read_text()[-3000:]

    async def wait_ready(self, http: httpx.AsyncClient, timeout: float = 120) -> None:
        assert self.proc is not None
        with trio.fail_after(timeout):
            while True:
                assert self.proc.poll() is None, self.log_tail()
                try:
                    if (await http.get(f"{self.url}/readyz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await trio.sleep(0.2)

    async def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then the exit code (killed after ``timeout``: -9)."""
        import signal

        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        with trio.move_on_after(timeout):
            while self.proc.poll() is None:
                await trio.sleep(0.05)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return int(self.proc.returncode)
