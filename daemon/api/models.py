"""Request and response bodies of the app's API (pydantic), and the shapes of ids and tokens.

Attribute names are the items' own camelCase names, as the data model stores them. Request bodies refuse
unknown fields and wrong types (the error names the field and why); ids and push tokens are checked for
shape before anything reaches DynamoDB. Response models document the answers; items carry whatever else
the engine and the sync jobs store beside the fields named here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"
"""A SportMonks id, a device id, a team id: no '#' (it separates the parts of composite keys)."""
TOKEN_PATTERN = r"^(?:[0-9a-fA-F]{2}){8,200}$"
"""An APNs token (device, push-to-start or Live Activity update token): hex, an even number of digits."""

Id = Annotated[str, Field(pattern=ID_PATTERN, description="an id: letters, digits, '_', '.', ':', '-'")]
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
    deviceId: Id
    updateToken: Token | None = None
    channelId: ChannelId | None = Field(
        None, description="instead of updateToken: the broadcast channel the activity was started on (iOS 18)"
    )

    @model_validator(mode="after")
    def _one_path(self) -> ActivityIn:
        if (self.updateToken is None) == (self.channelId is None):
            raise ValueError("exactly one of updateToken and channelId is required")
        return self


class TeamPatch(Body):
    name: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    code: Annotated[str, Field(min_length=1, max_length=20)] | None = None
    imageUrl: Annotated[str, Field(min_length=1, max_length=2000, pattern=r"^https?://")] | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> TeamPatch:
        if not self.model_fields_set:
            raise ValueError("at least one field to change is required")
        return self

    def fields(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.model_fields_set}


class LeaguePatch(TeamPatch):
    active: bool | None = None


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


class Display(BaseModel):
    matchId: str
    team: str
    displayState: dict[str, Any]


class Team(Item):
    teamId: str
    name: str | None = None
    code: str | None = None
    imageUrl: str | None = None


class TeamList(BaseModel):
    teams: list[Team]


class TeamSeason(Item):
    seasonId: str
    teamId: str


class TeamSeasonList(BaseModel):
    teams: list[TeamSeason]


class League(Item):
    leagueId: str
    name: str | None = None
    code: str | None = None
    imageUrl: str | None = None
    active: bool | None = None


class LeagueList(BaseModel):
    leagues: list[League]


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
    """An ISO-8601 time as the sortable form the fixtures store (``2026-10-09T13:00:00Z``); ValueError
    naming ``field`` otherwise. A time without an offset is UTC."""
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError as exc:
        raise ValueError(f"{field}: not an ISO-8601 time: {value[:40]!r}") from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
