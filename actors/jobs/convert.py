"""SportMonks JSON (fixture, team, league, season) -> items of our DynamoDB tables. Pure: no I/O, no clock.

Owns the shape of the items the sync jobs write to ``cricket-fixtures``, ``cricket-teams``, ``cricket-leagues``
and ``cricket-team-seasons``, and the ``syncHash`` that lets a job skip unchanged records. It must not touch
attributes other writers own (a fixture's ``displayState``/``archivedAt``, a league's ``active`` flag set by
admins): those are never produced here, so an update built from these items leaves them alone.

Conventions, from the data model: every id is a string (keys of the tables are strings of SportMonks ids),
``startTime`` is ISO 8601 UTC to the second with a ``Z`` (``2026-10-09T13:00:00Z``), so it sorts as text in
the ``leagueCode-startTime-index`` GSI. Missing optional values are ``None``; the GSI keys (``leagueCode``,
``startTime``) are left out rather than stored as NULL, because a GSI key attribute must be a string.

Bad input raises ``ConversionError`` naming the field path (``fixtures[3].starting_at: ...``); callers log
and skip that one record, so a single malformed fixture never stops a sync.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from actors.errors import ActorError
from daemon.store.codec import iso

# The fields of a fixture item that come from SportMonks; ``syncHash`` covers exactly these (and ``ttl``,
# which derives from startTime), so bookkeeping attributes (updatedAt) never make a fixture look changed.
FIXTURE_SYNCED_FIELDS: tuple[str, ...] = (
    "leagueId",
    "leagueCode",
    "seasonId",
    "startTime",
    "status",
    "localteamId",
    "visitorteamId",
    "venueId",
    "round",
    "type",
    "live",
    "note",
    "winnerTeamId",
)
TEAM_SYNCED_FIELDS: tuple[str, ...] = ("name", "code", "imageUrl", "countryId", "nationalTeam")
LEAGUE_SYNCED_FIELDS: tuple[str, ...] = ("name", "code", "imageUrl", "countryId", "type", "currentSeasonId")
TEAM_SEASON_SYNCED_FIELDS: tuple[str, ...] = ("leagueId", "seasonName", "teamName", "teamCode")

# SportMonks statuses after which nothing about the match will change (spec sportmonks-api.md §6).
TERMINAL_STATUSES = frozenset({"Finished", "Aban.", "Cancl.", "Postp."})
NOT_STARTED_STATUSES = frozenset({"NS", "Delayed"})


class ConversionError(ActorError, ValueError):
    """A SportMonks record we cannot turn into an item; the message names the field path."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


# --- time ----------------------------------------------------------------------------------------------


def parse_time(value: Any, path: str) -> datetime:
    """SportMonks timestamps (``2026-10-09T13:00:00.000000Z``, also without fraction or with an offset)."""
    if not isinstance(value, str) or not value:
        raise ConversionError(path, f"expected an ISO 8601 timestamp, got {value!r}")
    text = value.strip().replace(" ", "T")
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ConversionError(path, f"expected an ISO 8601 timestamp, got {value!r}") from None
    if parsed.tzinfo is None:  # SportMonks times are UTC even when the zone is left out
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def iso_utc(moment: datetime | float) -> str:
    """The sortable form stored in ``startTime``: second precision, UTC, ``Z``."""
    return iso(moment, timespec="seconds")


def epoch_of(iso: str) -> float:
    return parse_time(iso, "startTime").timestamp()


def sportmonks_datetime(epoch: float) -> str:
    """The form ``filter[starts_between]`` takes (UTC, no zone suffix)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S")


# --- field readers -------------------------------------------------------------------------------------


def _id(raw: Mapping[str, Any], key: str, path: str, *, required: bool) -> str | None:
    value = raw.get(key)
    if value is None:
        if required:
            raise ConversionError(f"{path}.{key}", "missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConversionError(f"{path}.{key}", f"expected an integer id, got {value!r}")
    text = str(value).strip()
    if not text.isdigit():
        raise ConversionError(f"{path}.{key}", f"expected an integer id, got {value!r}")
    return str(int(text))


def _str(raw: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> str | None:
    value = raw.get(key)
    if value is None:
        if required:
            raise ConversionError(f"{path}.{key}", "missing")
        return None
    if not isinstance(value, str):
        raise ConversionError(f"{path}.{key}", f"expected a string, got {type(value).__name__}")
    return value


def _bool(raw: Mapping[str, Any], key: str, path: str) -> bool | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise ConversionError(f"{path}.{key}", f"expected true/false, got {value!r}")
    return value


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConversionError(path, f"expected an object, got {type(value).__name__}")
    return value


def _include(raw: Mapping[str, Any], key: str) -> Any:
    """An include, bare or ``{"data": ...}``-wrapped (both occur, spec §9.11)."""
    value = raw.get(key)
    if isinstance(value, Mapping) and set(value) == {"data"}:
        return value["data"]
    return value


# --- hashing -------------------------------------------------------------------------------------------


def sync_hash(item: Mapping[str, Any], fields: Iterable[str]) -> str:
    """A short digest of the synced fields; equal digests mean nothing SportMonks owns has changed."""
    canonical = json.dumps(
        {f: item.get(f) for f in fields}, sort_keys=True, separators=(",", ":"), default=str
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:20]


def changed_fields(
    new: Mapping[str, Any], old: Mapping[str, Any] | None, fields: Iterable[str]
) -> dict[str, Any]:
    """The synced fields whose value differs (absent on one side counts as None)."""
    if old is None:
        return {f: new.get(f) for f in fields}
    return {f: new.get(f) for f in fields if new.get(f) != old.get(f)}


# --- fixtures ------------------------------------------------------------------------------------------


def fixture_item(
    raw: Any,
    *,
    league_codes: Mapping[str, str] | None = None,
    retention_days: float = 0.0,
    path: str = "fixture",
) -> dict[str, Any]:
    """One ``cricket-fixtures`` item (without ``updatedAt``, which the writer stamps) from a SportMonks fixture.

    The league code comes from the ``league`` include when present, else from ``league_codes``
    (leagueId -> code, from ``cricket-leagues``); without either the item has no ``leagueCode`` and stays
    out of the GSI until a later sync knows the code.
    """
    raw = _mapping(raw, path)
    match_id = _id(raw, "id", path, required=True)
    league_id = _id(raw, "league_id", path, required=False)
    start = parse_time(raw.get("starting_at"), f"{path}.starting_at")
    league_code: str | None = None
    league = _include(raw, "league")
    if league is not None:
        league_code = _str(_mapping(league, f"{path}.league"), "code", f"{path}.league")
    if league_code is None and league_id is not None and league_codes:
        league_code = league_codes.get(league_id)
    item: dict[str, Any] = {
        "matchId": match_id,
        "leagueId": league_id,
        "seasonId": _id(raw, "season_id", path, required=False),
        "startTime": iso_utc(start),
        "status": _str(raw, "status", path, required=True),
        "localteamId": _id(raw, "localteam_id", path, required=False),
        "visitorteamId": _id(raw, "visitorteam_id", path, required=False),
        "venueId": _id(raw, "venue_id", path, required=False),
        "round": _str(raw, "round", path),
        "type": _str(raw, "type", path),
        "live": _bool(raw, "live", path),
        "note": _str(raw, "note", path),
        "winnerTeamId": _id(raw, "winner_team_id", path, required=False),
    }
    if league_code:
        item["leagueCode"] = league_code
    if retention_days > 0:
        item["ttl"] = int(start.timestamp() + retention_days * 86400)
    item["syncHash"] = sync_hash(item, (*FIXTURE_SYNCED_FIELDS, "ttl"))
    return item


def fixture_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes to SET on an existing fixture: changed synced fields, plus ttl and syncHash."""
    fields = changed_fields(new, old, FIXTURE_SYNCED_FIELDS)
    # A GSI key cannot be set to NULL; a code we no longer know is left as it was.
    if fields.get("leagueCode") is None:
        fields.pop("leagueCode", None)
    if "ttl" in new and new["ttl"] != old.get("ttl"):
        fields["ttl"] = new["ttl"]
    fields["syncHash"] = new["syncHash"]
    return fields


# --- teams, leagues, seasons ----------------------------------------------------------------------------


def team_item(raw: Any, *, path: str = "team") -> dict[str, Any]:
    raw = _mapping(raw, path)
    item: dict[str, Any] = {
        "teamId": _id(raw, "id", path, required=True),
        "name": _str(raw, "name", path, required=True),
        "code": _str(raw, "code", path),
        "imageUrl": _str(raw, "image_path", path),
        "countryId": _id(raw, "country_id", path, required=False),
        "nationalTeam": _bool(raw, "national_team", path),
    }
    item["syncHash"] = sync_hash(item, TEAM_SYNCED_FIELDS)
    return item


def league_item(raw: Any, *, path: str = "league") -> dict[str, Any]:
    """A ``cricket-leagues`` item without ``active`` (admins own that flag; see the reference sync)."""
    raw = _mapping(raw, path)
    item: dict[str, Any] = {
        "leagueId": _id(raw, "id", path, required=True),
        "name": _str(raw, "name", path, required=True),
        "code": _str(raw, "code", path, required=True),
        "imageUrl": _str(raw, "image_path", path),
        "countryId": _id(raw, "country_id", path, required=False),
        "type": _str(raw, "type", path),
        "currentSeasonId": _id(raw, "season_id", path, required=False),
    }
    item["syncHash"] = sync_hash(item, LEAGUE_SYNCED_FIELDS)
    return item


def team_season_items(season: Any, *, path: str = "season") -> list[dict[str, Any]]:
    """``cricket-team-seasons`` items (PK seasonId, SK teamId) from ``/seasons/{id}?include=teams``."""
    season = _mapping(season, path)
    season_id = _id(season, "id", path, required=True)
    league_id = _id(season, "league_id", path, required=False)
    season_name = _str(season, "name", path)
    teams = _include(season, "teams")
    if teams is None:
        teams = []
    if not isinstance(teams, list):
        raise ConversionError(f"{path}.teams", f"expected a list, got {type(teams).__name__}")
    items = []
    for i, team in enumerate(teams):
        team_path = f"{path}.teams[{i}]"
        team = _mapping(team, team_path)
        item: dict[str, Any] = {
            "seasonId": season_id,
            "teamId": _id(team, "id", team_path, required=True),
            "leagueId": league_id,
            "seasonName": season_name,
            "teamName": _str(team, "name", team_path),
            "teamCode": _str(team, "code", team_path),
        }
        item["syncHash"] = sync_hash(item, TEAM_SEASON_SYNCED_FIELDS)
        items.append(item)
    return items


def convert_all(
    raws: Iterable[Any], convert: Callable[..., dict[str, Any]], *, what: str, **kwargs: Any
) -> tuple[list[dict[str, Any]], list[ConversionError]]:
    """Convert each record; bad ones are collected (with their index in the path), never fatal."""
    items: list[dict[str, Any]] = []
    errors: list[ConversionError] = []
    for i, raw in enumerate(raws):
        try:
            items.append(convert(raw, path=f"{what}[{i}]", **kwargs))
        except ConversionError as exc:
            errors.append(exc)
    return items, errors
