"""The shipped package: what the wheel (and so the container image) carries, and that it runs without the
demo extra.

The wheel is built offline (``pip wheel --no-deps --no-build-isolation``) from a copy of exactly the
files ``.dockerignore`` lets into the image's build context, so the check also covers the image: the
Dockerfile builds its wheel from that context.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO_EXTRA = ("moto", "flask", "flask_cors", "werkzeug", "trustme")
TEST_EXTRA = ("pytest", "pytest_trio", "hypothesis", "trustme", "tests")

pytestmark = pytest.mark.slow  # builds a wheel: several seconds


def _docker_context(dest: Path) -> list[str]:
    """Copy what .dockerignore admits ("*" then "!path" lines) into ``dest``; the admitted paths."""
    admitted = []
    excluded = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line == "*":
            continue
        if line.startswith("!"):
            admitted.append(line[1:].rstrip("/"))
        else:
            excluded.append(line)
    for rel in admitted:
        src = ROOT / rel
        if src.is_dir():
            shutil.copytree(
                src, dest / rel, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
            )
        else:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return admitted


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    context = tmp_path_factory.mktemp("context")
    _docker_context(context)
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(context),
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (found,) = out.glob("sightscreen-*.whl")
    return found


def test_every_file_the_dockerfile_copies_is_in_the_build_context(tmp_path: Path) -> None:
    admitted = set(_docker_context(tmp_path))
    sources = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        match = re.match(r"COPY\s+(?!--from)(.+)", line.strip())
        if match:
            *srcs, _dest = match.group(1).split()
            sources.extend(srcs)
    assert sources, "the Dockerfile copies nothing from the build context"
    for src in sources:
        path = src.rstrip("/").removeprefix("./")
        assert (tmp_path / path).exists(), f"Dockerfile copies {src}, which .dockerignore leaves out"
        assert any(path == a or path.startswith(a + "/") for a in admitted)


def test_the_wheel_holds_the_daemon_and_its_tapes_and_no_harness_or_tests(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"daemon", "actors", wheel.name.split("-py3")[0] + ".dist-info"}, tops
    assert not [n for n in names if "/testing/" in n or "/harness/" in n or n.startswith("tests/")]
    assert not fnmatch.filter(names, "*conftest.py") and not fnmatch.filter(names, "*/test_*.py")
    shipped_tapes = sorted(p.name for p in (ROOT / "daemon/replay/tapes").glob("*.json*"))
    assert shipped_tapes, "the source tree has no tapes"
    assert sorted(n.rsplit("/", 1)[1] for n in names if n.startswith("daemon/replay/tapes/")) == shipped_tapes
    for module in (
        "daemon/cli.py",
        "daemon/commands/demo.py",
        "daemon/demo/world.py",
        "daemon/commands/apns_server.py",
        "daemon/commands/replay.py",
        "daemon/store/local.py",
    ):
        assert module in names, f"{module} (the demo and the tools it ships) is missing from the wheel"
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "sightscreen = daemon.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


# Runs with only the unpacked wheel first on sys.path and the demo/test extras made unimportable.
_WITHOUT_EXTRAS = textwrap.dedent("""
    import importlib, json, sys
    from pathlib import Path

    blocked = set(sys.argv[2].split(","))

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in blocked:
                raise ImportError(f"{name} is not installed (blocked by the test)")
            return None

    sys.meta_path.insert(0, Block())
    root = Path(sys.argv[1])
    failed = {}
    for path in sorted(root.glob("**/*.py")):
        rel = path.relative_to(root).with_suffix("")
        if rel.name == "__main__":
            continue  # runs the CLI when imported
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        try:
            importlib.import_module(name)
        except Exception as exc:
            failed[name] = repr(exc)
    from daemon.cli import main
    print(json.dumps({"failed": failed, "apns_server": main(["apns-server"]), "demo": main(["demo"])}))
""")


def test_every_shipped_module_imports_without_the_demo_and_test_extras(wheel: Path, tmp_path: Path) -> None:
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    for meta in unpacked.glob("*.dist-info"):
        shutil.rmtree(meta)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRAS, str(unpacked), ",".join(DEMO_EXTRA + TEST_EXTRA)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(unpacked)},
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["failed"] == {}
    # the tools that need the demo extra refuse with a clear message and exit 2, not a traceback
    assert report["apns_server"] == 2 and report["demo"] == 2
    assert "pip install 'sightscreen[demo]'" in result.stderr
    assert "Traceback" not in result.stderr
