"""Debian tools the tests run as real peers (promtool and Prometheus, nginx, systemd-analyze), installed on
first use so the README's test command runs the whole suite on a fresh machine.

``debian_tool(binary, package)`` returns the binary's path, installing ``package`` with apt-get when the binary
is missing and the tests run as root on a Debian-like system (as CI and this project's machines do). One lock
file serialises the installs of parallel test workers, and the answer is remembered per process. Where the
tool is missing and cannot be installed (not root, no apt-get, no network to the package mirror) it returns
None, and the test skips saying what to install.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("SIGHTSCREEN_TOOL_CACHE", Path.home() / ".cache" / "sightscreen"))
# apt-get's own lock would fail the second worker; this one makes it wait for the first worker's install.
LOCK = CACHE / "apt-install.lock"
SBIN = ("/usr/sbin", "/sbin", "/usr/bin")


def _which(binary: str) -> str | None:
    found = shutil.which(binary)
    if found:
        return found
    for folder in SBIN:
        candidate = Path(folder) / binary
        if candidate.exists():
            return str(candidate)
    return None


def _can_install() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get") is not None


def _apt_install(*packages: str) -> bool:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]
    if subprocess.run(install, timeout=900, check=False, **quiet).returncode == 0:  # type: ignore[call-overload]
        return True
    subprocess.run(["apt-get", "update", "-qq"], timeout=600, check=False, **quiet)  # type: ignore[call-overload]
    return subprocess.run(install, timeout=900, check=False, **quiet).returncode == 0  # type: ignore[call-overload]


@cache
def debian_tool(binary: str, package: str, *extra_packages: str) -> str | None:
    """The path of ``binary``, installing Debian's ``package`` (and ``extra_packages``) first if needed."""
    found = _which(binary)
    if found or not _can_install():
        return found
    CACHE.mkdir(parents=True, exist_ok=True)
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = _which(binary)  # another worker may have installed it while this one waited
        if found is None:
            try:
                _apt_install(package, *extra_packages)
            except (OSError, subprocess.SubprocessError):
                return None
            found = _which(binary)
    return found


def promtool() -> str | None:
    return debian_tool("promtool", "prometheus")


def prometheus() -> str | None:
    return debian_tool("prometheus", "prometheus")


def nginx() -> str | None:
    """nginx with HTTP/2 and TLS, and the echo module the APNs stand-in reads bodies with."""
    return debian_tool("nginx", "nginx-light", "libnginx-mod-http-echo")


def systemd_analyze() -> str | None:
    return debian_tool("systemd-analyze", "systemd")


@pytest.fixture
def nginx_installed() -> str:
    """nginx's path for a test that runs it (installed if needed); the test skips, saying why, without it."""
    path = nginx()
    if path is None:
        pytest.skip(
            "nginx is not installed and cannot be here (Debian: apt-get install nginx-light, as root)"
        )
    return path
