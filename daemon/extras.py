"""Optional dependencies, imported where they are used, with one clear error when one is missing.

The daemon itself needs only the core dependencies. The demo's local parts (moto's DynamoDB server, the
throw-away certificate authority of the APNs test server) come with the ``demo`` extra, which the
production image does not install: a command that needs it says which extra to install instead of failing
on an ImportError deep in a stack trace.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from types import ModuleType

# Import names of the demo extra's packages (pyproject.toml, [project.optional-dependencies] demo).
DEMO_MODULES: tuple[str, ...] = ("moto", "flask", "flask_cors", "werkzeug", "trustme")


class MissingExtra(RuntimeError):
    """A command needs an optional dependency that is not installed; the message says how to get it."""


def _message(missing: Iterable[str], extra: str, purpose: str) -> str:
    names = ", ".join(missing)
    return f"{purpose} needs {names}, not installed here: pip install 'sightscreen[{extra}]'"


def require(module: str, *, purpose: str, extra: str = "demo") -> ModuleType:
    """Import ``module`` or raise ``MissingExtra`` naming the extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(_message([module], extra, purpose)) from exc


def check_installed(modules: Iterable[str], *, purpose: str, extra: str = "demo") -> None:
    """Raise ``MissingExtra`` listing every one of ``modules`` that cannot be imported."""
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    if missing:
        raise MissingExtra(_message(missing, extra, purpose))
