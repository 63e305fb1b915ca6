"""Request and response bodies of the app's API (pydantic), and the shapes of ids and tokens.

Attribute names are the items' own camelCase names, as the data model stores them. Request bodies refuse
unknown fields and wrong types (the error names the field and why); ids and push tokens are checked for
shape before anything reaches DynamoDB. Response models document the answers; items carry whatever else
the engine and the sync jobs store beside the fields named here.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ID_PATTERN = r"^[A-Za-z0-9_.:-]*[A-Za-z0-9_:-][A-Za-z0-9_.:-]*$"
"""A SportMonks id, a device id, a team id (with ``ID_MAX`` characters at most): no '#' (it separates the
parts of composite keys), and not dots alone (a client normalising the URL's ``.`` and ``..`` segments would
send another path)."""
ID_MAX = 64
_ID = re.compile(ID_PATTERN)


def is_id(value: str) -> bool:
    return 0 < len(value) <= ID_MAX and _ID.fullmatch(value) is not None


TOKEN_PATTERN = r"^(?:[0-9a-fA-F]{2}){8,200}$"
"""An APNs token (device, push-to-start or Live Activity update token): hex, an even number of digits."""

Id = Annotated[
    str,
    Field(pattern=ID_PATTERN, max_length=ID_MAX, description="an id: letters, digits, '_', '.', ':', '-'"),
]
Token = Annotated[str, Field(pattern=TOKEN_PATTERN, description="an APNs token in hex")]
ChannelId = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9+/]+={0,2}$", max_length=256, description="an APNs broadcast channel id (base64)"
    ),
]
Version = Annotated[str, Field(pattern=r"^[0-9A-Za-z._ ()+-]{1,40}$")]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class NoNullBody(Body):
    """A body whose optional fields are left out, never null: null would otherwise read as "remove" to one
    client and "keep" to another, so it is refused with the field named (the schema says the same)."""

    @model_validator(mode="before")
    @classmethod
    def _no_null(cls, data: Any) -> Any:
        if isinstance(data, dict):
            nulls = sorted(k for k, v in data.items() if v is None and k in cls.model_fields)
            if nulls:
                raise ValueError(f"{', '.join(nulls)}: null is not a value here; leave the field out instead")
        return data


def _not_null(schema: dict[str, Any]) -> None:
    """The JSON schema of an optional field that is never null: its non-null branch, without a default."""
    branches = [b for b in schema.pop("anyOf", []) if b.get("type") != "null"]
    if len(branches) == 1:
        schema.update(branches[0])
    schema.pop("default", None)


# --- requests -------------------------------------------------------------------------------------------


class DeviceIn(Body):
    deviceToken: Token
    platform: Literal["ios", "ipados"] = "ios"
    osVersion: Version
    appVersion: Version
    apnsToken: Token | None = None
    pushToStartToken: Token | None = None


class PushToStartIn(Body):
    pushToStartToken: Token


class FollowIn(Body):
    teamId: Id | None = None


class FollowPatchIn(Body):
    teamId: Id


class ActivityIn(Body):
    """A token-based Live Activity's registration: the device and the activity's APNs update token. An
    activity started on an iOS 18 broadcast channel registers at ``POST /user/activity/{matchId}/channel``."""

    deviceId: Id
    updateToken: Token = Field(description="the activity's APNs update token")

    @model_validator(mode="before")
    @classmethod
    def _channel_elsewhere(cls, data: Any) -> Any:
        if isinstance(data, dict) and "channelId" in data:
            raise ValueError(
                "channelId: an activity on a broadcast channel registers at POST /user/activity/{matchId}/channel"
            )
        return data


class ChannelActivityIn(Body):
    """An iOS 18 Live Activity started on a broadcast channel: the device and the channel, one of the match's
    own (``broadcastChannels`` of the fixture)."""

    deviceId: Id
    channelId: ChannelId = Field(description="the broadcast channel the activity was started on")


class ActivityTokenIn(Body):
    """A rotated update token of a token-based Live Activity."""

    deviceId: Id
    updateToken: Token


class TeamPatch(NoNullBody):
    """The fields to change (at least one); a field left out keeps its value, and none can be removed."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    name: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(
        None, json_schema_extra=_not_null
    )
    code: Annotated[str, Field(min_length=1, max_length=20)] | None = Field(None, json_schema_extra=_not_null)
    imageUrl: Annotated[str, Field(min_length=1, max_length=2000, pattern=r"^https?://")] | None = Field(
        None, json_schema_extra=_not_null
    )

    @model_validator(mode="after")
    def _not_empty(self) -> TeamPatch:
        if not self.model_fields_set:
            raise ValueError("at least one field to change is required")
        return self

    def fields(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.model_fields_set}


class LeaguePatch(TeamPatch):
    active: bool | None = Field(None, json_schema_extra=_not_null)


# --- answers --------------------------------------------------------------------------------------------


class Item(BaseModel):
    model_config = ConfigDict(extra="allow")


class Fixture(Item):
    matchId: str
    leagueCode: str | None = None
    startTime: str | None = None
    live: bool | None = None
    displayState: dict[str, Any] | None = None
    broadcastChannels: dict[str, str] | None = Field(
        None,
        description="iOS 18 broadcast channel per display perspective (neutral, team ids) while the match has them",
    )
    rawFixture: dict[str, Any] | None = Field(
        None, description="the cached SportMonks fixture, where one exists"
    )


class FixtureList(BaseModel):
    matches: list[Fixture]
    missing: list[str] = Field(default_factory=list, description="ids asked for and not found")
    next: str | None = Field(None, description="the cursor of the next page; null on the last")


class Display(BaseModel):
    matchId: str
    team: str = Field(description="the perspective: a team id, or neutral")
    displayState: dict[str, Any]


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    ready: bool
    checks: dict[str, bool | str] = Field(description="each check: true, or why it fails")


class Team(Item):
    teamId: str
    name: str | None = None
    code: str | None = None
    imageUrl: str | None = None


class TeamList(BaseModel):
    teams: list[Team]
    next: str | None = Field(None, description="the cursor of the next page; null on the last")


class TeamSeason(Item):
    seasonId: str
    teamId: str


class TeamSeasonList(BaseModel):
    teams: list[TeamSeason]
    next: str | None = Field(None, description="the cursor of the next page; null on the last")


class League(Item):
    leagueId: str
    name: str | None = None
    code: str | None = None
    imageUrl: str | None = None
    active: bool | None = None


class LeagueList(BaseModel):
    leagues: list[League]
    next: str | None = Field(None, description="the cursor of the next page; null on the last")


class Device(Item):
    userId: str
    deviceToken: str
    platform: str | None = None
    osVersion: str | None = None
    appVersion: str | None = None
    apnsToken: str | None = None
    pushToStartToken: str | None = None


class Follow(Item):
    matchId: str
    userId: str
    teamId: str | None = None
    createdAt: str | None = None
    expiresAt: int | None = None


class Activity(Item):
    matchId: str
    userId: str
    deviceId: str
    status: str
    updateToken: str | None = None
    channelId: str | None = None
    sessionStartedAt: str | None = None
    endedAt: str | None = None
    endReason: str | None = None


class ActivityList(BaseModel):
    activities: list[Activity]
    next: str | None = Field(description="the cursor of the next page; null on the last")


class ActivityTokenUpdated(BaseModel):
    matchId: str
    userId: str
    deviceId: str
    updated: Literal[True]


class ActivityEnded(BaseModel):
    matchId: str
    userId: str
    deviceId: str
    status: Literal["ended"]
    endReason: Literal["user"]


class FollowStatus(BaseModel):
    following: bool
    follow: Follow | None = Field(description="the follow while following, else null")


class FieldError(BaseModel):
    field: str
    reason: str


class ErrorBody(BaseModel):
    status: int
    code: str
    message: str
    fields: list[FieldError] = Field(default_factory=list)


class ErrorAnswer(BaseModel):
    error: ErrorBody


def parse_iso_utc(value: str, field: str) -> str:
    """An ISO-8601 time as the sortable form the fixtures store (``2026-10-09T13:00:00Z``, the year always
    four digits, so the strings sort as the times do); ValueError naming ``field`` otherwise, a time whose
    UTC form falls outside years 1-9999 included. A time without an offset is UTC."""
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError as exc:
        raise ValueError(f"{field}: not an ISO-8601 time: {value[:40]!r}") from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    try:
        u = t.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{field}: outside the years 1-9999 once in UTC: {value[:40]!r}") from None
    # strftime's %Y does not pad years before 1000 on every platform ("999-..." sorts after "2027-...")
    return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"
