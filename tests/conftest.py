"""Fixtures shared by the whole suite.

Layout: a module's unit tests sit in ``tests/<package>/``, named for the package one level below the top-level
packages (``daemon/apns/...`` -> ``tests/apns/``, ``daemon/config/...`` -> ``tests/config/``, ``actors/jobs/...``
-> ``tests/jobs/``, ``daemon/runtime/...`` -> ``tests/runtime/``); modules directly in a top-level package go
to ``tests/daemon/`` and ``tests/actors/`` (``daemon/logs.py`` -> ``tests/daemon/test_logs.py``,
``actors/sender.py`` -> ``tests/actors/test_sender.py``), and ``bench/*.py`` to ``tests/bench/``. Tests that span packages by running
the daemon as processes live in ``tests/e2e/`` (end to end), ``tests/faults/`` (the fault matrix) and
``tests/deploy/`` (the shipped unit, image, wheel and observability files); the rigs they use, and those
rigs' own tests, in ``tests/harness/``. Multi-process end-to-end, fault, soak and benchmark tests are marked
``slow``; ``pytest -m "not slow"`` is the edit loop.

- ``moto_server``: one single-threaded moto DynamoDB server on loopback for the session (a real server,
  not in-process patching). Tests isolate themselves with a unique table prefix (``table_prefix``), so no
  reset is needed between tests and tests may run in any order. It records the DynamoDB permissions the
  engine's and the API's processes use (``tests/harness/aws_peer.py``); at the end of a whole run the policy
  gate compares them with the AWS template's role policies (``tests/harness/aws_policy_gate.py``).
- ``shared_data``: the folder of real SportMonks responses beside the project; tests that need it skip,
  saying why, where it is absent.
- ``sock_dir``: a short directory for Unix sockets; ``log_stream``: the daemon's JSON logs captured for the
  test (``log_lines`` parses them).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon import logs
from tests.harness import procfs
from tests.harness.aws_peer import AwsPeer
from tests.harness.aws_policy_gate import (  # noqa: F401 - hooks: record each role's DynamoDB calls, check the policy
    pytest_configure,
    pytest_runtest_logreport,
    pytest_sessionfinish,
    recording_path,
)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("SIGHTSCREEN_SHARED_DATA", PROJECT_ROOT.parent / "shared" / "data"))

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

# The modules that start several daemon processes at once, in one group. Under `--dist loadgroup` (README,
# .ci/run) a group runs on one worker, one test after another, so no two such modules run at a time: two side
# by side with the rest of the suite on two cores slowed the single-threaded DynamoDB peer past a 3 s lease's
# renewals (every instance lost every lease it took, and a fleet made no progress for minutes), and four
# starved the replay and APNs servers in the test processes; they failed on load, not on the code. Being the
# largest unit of work, the group is handed out first and runs beside the rest of the suite. Keyed by module
# here, because the controller that schedules sees node ids only, and pytest 9 moved the node id
# pytest-xdist's own `xdist_group` mark rewrites.
CLUSTER_GROUPS: dict[str, str] = {
    "tests/e2e/test_multi_instance.py": "cluster",
    "tests/e2e/test_fleet.py": "cluster",
    "tests/e2e/test_soak_channels.py": "cluster",
    "tests/e2e/test_soak.py": "cluster",
    "tests/e2e/test_region_from_empty.py": "cluster",
    "tests/faults/test_hot_match_faults.py": "cluster",
}


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup`: every test its own unit of work, except each of ``CLUSTER_GROUPS``, one unit."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ClusterGroups(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            group = CLUSTER_GROUPS.get(nodeid.split("::", 1)[0])
            return group if group is not None else nodeid

    return ClusterGroups(config, log)


def _daemon_children() -> set[int]:
    """This process's running child processes that are daemons (``python -m daemon run ...``), from /proc."""
    return {
        pid
        for pid in procfs.children(os.getpid())
        if ((procfs.cmdline(pid) or [])[1:4]) == [b"-m", b"daemon", b"run"]
    }


@pytest.fixture(autouse=True)
def _no_daemon_outlives_its_test() -> Iterator[None]:
    """Kill the daemon processes a test started and left running. A test that times out (pytest-timeout
    interrupts it where it stands) can skip its own clean-up; its daemons would then load the machine for
    every test after it on that worker, and fail them on load. Only ``python -m daemon run`` children started
    during the test: the peers fixtures start (moto, nginx, dynalite, the issuer) are left alone."""
    before = _daemon_children()
    yield
    for pid in _daemon_children() - before:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        print(f"killed daemon process {pid}, which its test left running")


@pytest.fixture(scope="session")
def moto_server(request: pytest.FixtureRequest) -> Iterator[AwsPeer]:
    server = AwsPeer(record=recording_path(request.config)).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def table_prefix() -> str:
    """A prefix unique to this test, so tests share one moto server without seeing each other's tables."""
    return f"t{uuid.uuid4().hex[:10]}-"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    folder = SHARED_DATA / "sportmonks"
    if not folder.is_dir():
        pytest.skip(f"real SportMonks payloads not found at {folder} (../shared/data is absent)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def real_fixture_path(shared_data: Path) -> Path:
    path = shared_data / "sportmonks" / "fixture-71344-pak-v-sl-t20i-2026-10-09-live-2nd-innings.json"
    if not path.is_file():
        pytest.skip(f"real fixture payload {path.name} not found in {path.parent}")
    return path


# --- data layer (appended by the store engineer) ---------------------------------------------------------


@pytest.fixture
async def dynamo(moto_server: AwsPeer, table_prefix: str):  # type: ignore[no-untyped-def]
    """A ``Dynamo`` on the session's moto server with all eleven tables created under this test's prefix.

    Batch backoff is shortened so retry tests run in milliseconds; everything else is the production
    default."""
    from daemon.store import Dynamo, DynamoSettings, create_tables

    settings = DynamoSettings(
        endpoint_url=moto_server.url,
        table_prefix=table_prefix,
        batch_backoff_base_s=0.001,
        batch_backoff_max_s=0.01,
    )
    client = Dynamo(settings)
    await create_tables(client)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
async def repos(dynamo):  # type: ignore[no-untyped-def]
    """``Repositories`` over the ``dynamo`` fixture."""
    from daemon.store import Repositories

    return Repositories(dynamo)


# --- sockets and logs ------------------------------------------------------------------------------------


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory for sockets: AF_UNIX paths are limited to 107 bytes, pytest's tmp_path can exceed it."""
    path = Path(tempfile.mkdtemp(prefix="ss-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    """Logs configured as JSON into a buffer for the test; reset afterwards so no test inherits the stream."""
    stream = io.StringIO()
    logs.configure("debug", json=True, stream=stream, instance_id="test-instance")
    try:
        yield stream
    finally:
        logs.reset()


def log_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
