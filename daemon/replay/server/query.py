"""SportMonks query rules as the replay server applies them: paths, includes, filters, sorting, pagination
and the reference objects (teams, leagues, seasons, scores) the tapes know about.

Pure functions of the query and already-built fixture data; a rule the server does not support is a
``ReplayRequestError`` naming it, never a silent empty answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

from daemon.replay.server.http import ReplayRequestError, encode_json
from daemon.replay.tape import FIXTURE_INCLUDES, SCORES, Tape

API_PREFIX = "/api/v2.0"
ENDPOINTS = ("livescores", "fixture", "fixtures", "teams", "leagues", "seasons", "scores")
REFERENCE_INCLUDES: dict[str, set[str]] = {
    "teams": {"squad"},
    "leagues": {"season", "seasons"},
    "seasons": {"league", "teams", "fixtures"},
    "scores": set(),
}
# Includes SportMonks knows but tapes do not model: answered empty rather than refused.
UNMODELLED_INCLUDES: dict[str, Callable[[], Any]] = {
    "scoreboards": list,
    "manofmatch": lambda: None,
    "manofseries": lambda: None,
    "firstumpire": lambda: None,
    "secondumpire": lambda: None,
    "tvumpire": lambda: None,
    "referee": lambda: None,
}
FILTERABLE = {
    "id",
    "league_id",
    "season_id",
    "stage_id",
    "round",
    "type",
    "status",
    "localteam_id",
    "visitorteam_id",
    "venue_id",
    "winner_team_id",
}
NOT_LIVE = {"NS", "Finished", "Aban.", "Cancl.", "Postp."}
# The unit SportMonks counts its hourly limit in (spec §4: per endpoint, i.e. per entity): /fixtures/{id}
# and /fixtures are one.
ENTITY_OF_ENDPOINT = {"fixture": "fixtures"}
Fields = tuple[tuple[str, frozenset[str]], ...]  # ((resource, fields), ...), sorted: hashable for caches

Row = TypeVar("Row")


def endpoint_of(segments: list[str]) -> str | None:
    """The endpoint a data path belongs to (the name faults and counters use), None if not served."""
    if segments == ["livescores"]:
        return "livescores"
    if segments == ["fixtures"]:
        return "fixtures"
    if len(segments) == 2 and segments[0] == "fixtures":
        return "fixture"
    if 1 <= len(segments) <= 2 and segments[0] in REFERENCE_INCLUDES:
        return segments[0]
    return None


def positive_number(query: dict[str, str], name: str) -> float:
    try:
        value = float(query[name])
    except ValueError:
        raise ReplayRequestError(f"{name}: not a number: {query[name]!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise ReplayRequestError(f"{name}: must be a positive number, got {query[name]!r}")
    return value


def integer(query: dict[str, str], name: str) -> int:
    raw = query[name]
    if not raw.lstrip("-").isdigit():
        raise ReplayRequestError(f"{name}: not an integer: {raw!r}")
    return int(raw)


def parse_include(raw: str) -> frozenset[str]:
    """A fixture's ``include``: the top-level relations named (``balls.score`` counts as ``balls``)."""
    names = set()
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        top = item.split(".", 1)[0]
        if top not in FIXTURE_INCLUDES and top not in UNMODELLED_INCLUDES:
            raise ReplayRequestError(f"include: unknown relation {item!r}")
        names.add(top)
    return frozenset(names)


def reference_include(kind: str, raw: str) -> set[str]:
    """A reference endpoint's ``include``, refused when it names a relation ``kind`` does not have."""
    include = {item.strip().split(".", 1)[0] for item in raw.split(",") if item.strip()}
    unknown = include - REFERENCE_INCLUDES[kind]
    if unknown:
        raise ReplayRequestError(f"include: {kind} cannot include {', '.join(sorted(unknown))}")
    return include


def entity_of(endpoint: str) -> str:
    """The budget entity of an endpoint name (``fixture`` counts as ``fixtures``)."""
    return ENTITY_OF_ENDPOINT.get(endpoint, endpoint)


def parse_fields(query: dict[str, str]) -> Fields:
    """``fields[resource]=a,b``: the sparse fieldset per resource (``fixtures``, ``balls``, ``runs``,
    ``battings``, ``bowlings``, ``players``, ``teams``, ``scores``, ...), as a hashable, sorted tuple."""
    out: dict[str, frozenset[str]] = {}
    for key, value in query.items():
        if key.startswith("fields[") and key.endswith("]"):
            resource = key[7:-1].strip()
            names = frozenset(v.strip() for v in value.split(",") if v.strip())
            if not resource or not names:
                raise ReplayRequestError(f"{key}: needs a resource and at least one field")
            out[resource] = names
    return tuple(sorted(out.items()))


def sparse(obj: Any, fields: Fields, relations: frozenset[str]) -> Any:
    """``obj`` with each resource cut to its sparse fieldset: an object whose ``resource`` has a fieldset
    keeps those fields, its ``id`` and ``resource``, and its included relations (``relations``: every name in
    the ``include``, ``balls.score`` giving ``balls`` and ``score``), each cut the same way. A new object:
    ``obj`` is left as it is (rendered objects are shared between answers)."""
    wanted = dict(fields)
    if isinstance(obj, list):
        return [sparse(item, fields, relations) for item in obj]
    if not isinstance(obj, dict):
        return obj
    keep = wanted.get(str(obj.get("resource")))
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if key in relations and isinstance(value, dict | list | type(None)):
            out[key] = sparse(value, fields, relations)
        elif keep is None or key in keep or key in ("id", "resource"):
            out[key] = value
    return out


def relation_names(raw_include: str) -> frozenset[str]:
    """Every relation an ``include`` names at any depth: ``balls.score,runs`` -> balls, score, runs."""
    return frozenset(
        part.strip() for item in raw_include.split(",") for part in item.split(".") if part.strip()
    )


def parse_filters(query: dict[str, str]) -> dict[str, list[str]]:
    """``filter[field]=a,b`` (any of the values) for every supported field, and ``starts_between``."""
    filters: dict[str, list[str]] = {}
    for key, value in query.items():
        if key.startswith("filter[") and key.endswith("]"):
            name = key[7:-1]
            if name not in FILTERABLE and name != "starts_between":
                raise ReplayRequestError(
                    f"filter[{name}] is not supported (try {', '.join(sorted(FILTERABLE))})"
                )
            filters[name] = [v.strip() for v in value.split(",")]
    return filters


def passes(base: dict[str, Any], filters: dict[str, list[str]]) -> bool:
    """Whether a fixture's base fields pass every filter."""
    return all(_passes(base, name, values) for name, values in filters.items())


def sort_rows(rows: list[tuple[Row, dict[str, Any]]], query: dict[str, str]) -> None:
    """Sort (item, base fields) rows in place by ``sort`` (comma-separated, ``-`` for descending)."""
    sort = query.get("sort")
    if not sort:
        return
    for key in reversed(sort.split(",")):
        desc, name = key.startswith("-"), key.lstrip("-")
        if name not in FILTERABLE and name not in ("starting_at", "updated_at"):
            raise ReplayRequestError(f"sort: cannot sort by {name!r}")
        rows.sort(key=partial(_row_sort_key, name), reverse=desc)


def page(items: list[bytes], query: dict[str, str], host: str, path: str, page_size: int) -> bytes:
    """A Laravel paginator page of already-encoded items (``page``, ``per_page`` = page_size)."""
    raw_page = query.get("page", "1")
    if not raw_page.isdigit() or int(raw_page) < 1:
        raise ReplayRequestError(f"page: must be a positive integer, got {raw_page!r}")
    number = int(raw_page)
    total = len(items)
    last_page = max(1, math.ceil(total / page_size))
    chunk = items[(number - 1) * page_size : number * page_size]
    body = b",".join(chunk)
    base_url = f"http://{host}{path}"

    def link(n: int | None) -> str | None:
        return None if n is None else f"{base_url}?page={n}"  # only page=N, as the real API (spec §9.10)

    first_index = (number - 1) * page_size + 1 if chunk else None
    meta = {
        "current_page": number,
        "from": first_index,
        "last_page": last_page,
        "links": [{"url": link(n), "label": str(n), "active": n == number} for n in range(1, last_page + 1)],
        "path": base_url,
        "per_page": page_size,
        "to": (first_index + len(chunk) - 1) if first_index else None,
        "total": total,
    }
    links = {
        "first": link(1),
        "last": link(last_page),
        "prev": link(number - 1) if number > 1 else None,
        "next": link(number + 1) if number < last_page else None,
    }
    return b'{"data":[' + body + b'],"links":' + encode_json(links) + b',"meta":' + encode_json(meta) + b"}"


def reference_objects(
    tapes: Iterable[Tape], kind: str, include: set[str], fixture_of: Callable[[Tape], dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Every ``kind`` object (teams, leagues, seasons, scores) the tapes know, by id, with ``include``.

    ``fixture_of`` gives a tape's fixture as served now (for ``seasons?include=fixtures``).
    """
    tapes = list(tapes)
    out: dict[str, dict[str, Any]] = {}
    if kind == "scores":
        for tape in tapes:
            for score in tape.score_catalogue().values():
                out.setdefault(str(score.id), score.to_json())
        if not out:
            out = {str(sid): score.to_json() for sid, score in SCORES.items()}
        return dict(sorted(out.items(), key=lambda kv: int(kv[0])))
    for tape in tapes:
        league = _league_json(tape)
        season = _season_json(tape)
        teams = [tape.localteam.to_json("teams"), tape.visitorteam.to_json("teams")]
        if kind == "teams":
            for team in teams:
                obj = out.setdefault(str(team["id"]), team)
                if "squad" in include:
                    players, _ = tape.json_tables()
                    squad = obj.setdefault("squad", [])
                    known = {p["id"] for p in squad}
                    squad.extend(
                        dict(players[e.player_id])
                        for e in tape.lineups
                        if e.team_id == team["id"] and e.player_id not in known
                    )
        elif kind == "leagues":
            obj = out.setdefault(str(league["id"]), league)
            if "seasons" in include:
                seasons = obj.setdefault("seasons", [])
                if season["id"] not in {x["id"] for x in seasons}:
                    seasons.append(season)
            if "season" in include and league.get("season_id") in (None, season["id"]):
                obj["season"] = season  # the league's current season
        else:  # seasons
            obj = out.setdefault(str(season["id"]), season)
            if "league" in include:
                obj["league"] = league
            if "teams" in include:
                have = obj.setdefault("teams", [])
                have.extend(t for t in teams if t["id"] not in {x["id"] for x in have})
            if "fixtures" in include:
                obj.setdefault("fixtures", []).append(fixture_of(tape))
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def _league_json(tape: Tape) -> dict[str, Any]:
    if tape.league is not None:
        return tape.league.to_json("leagues")
    return {
        "resource": "leagues",
        "id": tape.league_id,
        "season_id": tape.season_id,
        "name": f"League {tape.league_id}",
    }


def _season_json(tape: Tape) -> dict[str, Any]:
    if tape.season is not None:
        season = tape.season.to_json("seasons")
        if season.get("league_id") is None:
            season["league_id"] = tape.league_id
        return season
    return {
        "resource": "seasons",
        "id": tape.season_id,
        "league_id": tape.league_id,
        "name": str(tape.season_id),
    }


def _row_sort_key(name: str, row: tuple[Any, dict[str, Any]]) -> tuple[int, float, str]:
    return _sort_key(row[1].get(name))


def _sort_key(value: Any) -> tuple[int, float, str]:
    if value is None:
        return (2, 0.0, "")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def _passes(base: dict[str, Any], name: str, values: list[str]) -> bool:
    if name == "starts_between":
        if len(values) != 2:
            raise ReplayRequestError("filter[starts_between]: needs two dates separated by a comma")
        start = _as_dt(values[0], end=False)
        end = _as_dt(values[1], end=True)
        at = datetime.fromisoformat(base["starting_at"].replace("Z", "+00:00"))
        return start <= at <= end
    value = base.get(name)
    return str(value) in values or (isinstance(value, bool) and str(value).lower() in values)


def _as_dt(raw: str, *, end: bool) -> datetime:
    try:
        if len(raw) == 10:  # a date: the whole day
            day = datetime.fromisoformat(raw).replace(tzinfo=UTC)
            return day.replace(hour=23, minute=59, second=59, microsecond=999999) if end else day
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ReplayRequestError(f"filter[starts_between]: not a date or datetime: {raw!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
