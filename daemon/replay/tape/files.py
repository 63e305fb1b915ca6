"""Tapes on disk: JSON, gzip when the name ends ``.gz``, written atomically; the tapes the package ships."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import (
    ValidationError,
)

from daemon.replay.tape.model import Tape
from daemon.replay.tape.terms import TapeError

TAPES_DIR = Path(__file__).resolve().parent.parent / "tapes"


def validate_tape(raw: Any, where: str) -> Tape:
    try:
        return Tape.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise TapeError(f"{where}: {loc or 'tape'}: {first['msg']} ({exc.error_count()} error(s))") from exc


def tape_to_json(tape: Tape) -> dict[str, Any]:
    data = tape.model_dump(mode="json", exclude_none=True)
    # keep entries compact: nulls in balls are the default anyway
    return data


def load_tape(path: str | Path) -> Tape:
    """Read a tape (``.json`` or ``.json.gz``); errors name the file and the offending field."""
    path = Path(path)
    try:
        raw_bytes = path.read_bytes()
        if path.name.endswith(".gz"):
            raw_bytes = gzip.decompress(raw_bytes)
        raw = json.loads(raw_bytes)
    except OSError as exc:
        raise TapeError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError, gzip.BadGzipFile, EOFError) as exc:
        raise TapeError(f"{path}: not a JSON tape: {exc}") from exc
    return validate_tape(raw, str(path))


def save_tape(tape: Tape, path: str | Path) -> None:
    """Write a tape atomically (a temporary file renamed into place); gzip when the name ends ``.gz``."""
    path = Path(path)
    body = json.dumps(tape_to_json(tape), separators=(",", ":"), ensure_ascii=False).encode()
    if path.name.endswith(".gz"):
        body = gzip.compress(body, mtime=0)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(body)
    tmp.replace(path)


def builtin_tape_path(name: str = "t20-demo") -> Path:
    """A tape shipped inside the package (``daemon/replay/tapes/<name>.json[.gz]``)."""
    for candidate in (TAPES_DIR / f"{name}.json", TAPES_DIR / f"{name}.json.gz", TAPES_DIR / name):
        if candidate.is_file():
            return candidate
    known = sorted(p.name.split(".")[0] for p in TAPES_DIR.glob("*.json*"))
    raise TapeError(f"no built-in tape {name!r} (have: {', '.join(known) or 'none'})")


def resolve_tape(name: str) -> Tape:
    """A tape file, or the name of a tape shipped with the package (``t20-demo``)."""
    path = Path(name)
    if path.exists():
        return load_tape(path)
    try:
        return load_tape(builtin_tape_path(name))
    except TapeError:
        raise TapeError(f"{name}: no such file, and not a built-in tape") from None


def iter_cursors(tape: Tape) -> Iterable[int]:
    """Every cursor from an empty feed to the whole tape."""
    return range(len(tape.entries) + 1)
