"""The error tree (docs/architecture.md, "Errors"): every exception class the shipped packages define is under
its package's root, so a caller can catch a package's errors by kind, and the page lists each of them."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import actors
import daemon
from actors.errors import ActorError
from daemon.api.errors import ApiException
from daemon.apns.types import ApnsError
from daemon.config.loading import ConfigError
from daemon.cricket.errors import EngineError
from daemon.extras import MissingExtra
from daemon.replay.errors import ReplayError
from daemon.runtime.errors import DaemonRuntimeError
from daemon.sportmonks.errors import SportMonksError
from daemon.store.dynamo import StoreError

ROOT = Path(__file__).resolve().parents[1]

# Each package's root: the longest matching prefix names the package a module is in.
ROOTS: dict[str, type[BaseException]] = {
    "daemon.extras": MissingExtra,
    "daemon.cricket": EngineError,
    "daemon.store": StoreError,
    "daemon.sportmonks": SportMonksError,
    "daemon.apns": ApnsError,
    "daemon.replay": ReplayError,
    "daemon.config": ConfigError,
    "daemon.runtime": DaemonRuntimeError,
    "daemon.api": ApiException,
    "actors": ActorError,
}


def _modules() -> list[str]:
    names: list[str] = []
    for package in (daemon, actors):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            names.append(info.name)
    return names


def _errors() -> dict[str, type[BaseException]]:
    """Every exception class defined in the shipped packages, by ``module.Class``."""
    found: dict[str, type[BaseException]] = {}
    for name in _modules():
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                found[f"{name}.{attr}"] = value
    return found


def _root_of(module: str) -> type[BaseException] | None:
    best = max((p for p in ROOTS if module == p or module.startswith(p + ".")), key=len, default=None)
    return None if best is None else ROOTS[best]


def test_every_error_is_under_its_packages_root() -> None:
    errors = _errors()
    assert len(errors) >= 30  # the packages were found
    astray = []
    for name, cls in errors.items():
        root = _root_of(cls.__module__)
        if root is None or not issubclass(cls, root):
            astray.append(f"{name} ({', '.join(b.__name__ for b in cls.__bases__)}) not under {root}")
    assert astray == [], "derive it from its package's root, or add a root to ROOTS and the page"


def test_the_architecture_page_lists_the_whole_tree() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"\w+", section))
    missing = sorted(
        cls.__name__
        for cls in _errors().values()
        if not cls.__name__.startswith("_") and cls.__name__ not in listed
    )
    assert missing == [], "docs/architecture.md, Errors: list each error under its root"
