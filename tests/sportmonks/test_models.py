"""Response models: every real payload parses; malformed ones are rejected naming the field path."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from daemon.sportmonks import models


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _problems(envelope: type[models.BaseModel], payload: Any) -> list[str]:
    with pytest.raises(ValidationError) as info:
        envelope.model_validate(payload)
    return models.describe_validation_error(info.value)


ENVELOPE_BY_PREFIX = {
    "fixture-": models.FixtureEnvelope,
    "fixtures-list-": models.FixtureListEnvelope,
    "player-": models.PlayerEnvelope,
    "standings-": models.StandingListEnvelope,
}


def test_every_real_payload_parses(shared_data: Path) -> None:
    files = sorted((shared_data / "sportmonks").glob("*.json"))
    assert files, "no real payloads in the shared data folder"
    for path in files:
        envelope = next((e for p, e in ENVELOPE_BY_PREFIX.items() if path.name.startswith(p)), None)
        assert envelope is not None, f"no model registered for real payload {path.name}"
        envelope.model_validate(_load(path))


def test_real_fixture_parses_with_all_its_includes(real_fixture_path: Path) -> None:
    parsed = models.FixtureEnvelope.model_validate(_load(real_fixture_path)).data
    assert parsed.id == 71344
    assert parsed.status == "2nd Innings"
    assert parsed.balls is not None and len(parsed.balls) == 135
    assert parsed.runs is not None and [r.score for r in parsed.runs] == [182, 10]
    assert parsed.lineup is not None and len(parsed.lineup) == 22
    assert parsed.winnerteam is None
    assert parsed.balls[0].score is not None and parsed.balls[0].score.name == "1 Run"


def test_real_fixture_as_a_livescores_item_parses(real_fixture_path: Path) -> None:
    models.FixtureListEnvelope.model_validate({"data": [_load(real_fixture_path)["data"]]})


def test_wrong_type_is_reported_with_its_field_path(real_fixture_path: Path) -> None:
    fixture = _load(real_fixture_path)["data"]
    fixture["runs"][1]["score"] = "12"
    problems = _problems(models.FixtureListEnvelope, {"data": [fixture]})
    assert problems == ["data[0].runs[1].score: expected integer, got string '12'"]


def test_several_problems_are_all_reported(real_fixture_path: Path) -> None:
    fixture = _load(real_fixture_path)["data"]
    fixture["balls"][3]["score"]["four"] = 1
    del fixture["balls"][0]["ball"]
    fixture["localteam"]["name"] = 5
    problems = _problems(models.FixtureEnvelope, {"data": fixture})
    assert set(problems) == {
        "data.balls[3].score.four: expected boolean, got integer 1",
        "data.balls[0].ball: required field is missing",
        "data.localteam.name: expected string, got integer 5",
    }


def test_null_in_a_core_field_is_malformed_but_null_elsewhere_is_tolerated(real_fixture_path: Path) -> None:
    fixture = _load(real_fixture_path)["data"]
    fixture["note"] = None
    fixture["venue"] = None
    fixture["batting"][0]["score"] = None
    fixture["balls"][0]["score"] = None
    models.FixtureEnvelope.model_validate({"data": fixture})
    fixture["runs"][0]["wickets"] = None
    assert _problems(models.FixtureEnvelope, {"data": fixture}) == [
        "data.runs[0].wickets: expected integer, got null"
    ]


def test_unknown_fields_are_kept_and_ignored() -> None:
    payload = {"data": {"id": 1, "status": "NS", "brand_new_field": {"x": [1, 2]}, "runs": []}}
    parsed = models.FixtureEnvelope.model_validate(payload).data
    assert parsed.model_extra == {"brand_new_field": {"x": [1, 2]}}


def test_sparse_fieldset_with_only_an_id_parses() -> None:
    models.FixtureListEnvelope.model_validate({"data": [{"id": 5}, {"id": 6, "status": "Finished"}]})


def test_bool_is_not_accepted_as_an_integer_id() -> None:
    assert _problems(models.FixtureListEnvelope, {"data": [{"id": True}]}) == [
        "data[0].id: expected integer, got boolean true"
    ]


def test_int_and_float_both_accepted_for_overs() -> None:
    run = {"id": 1, "team_id": 1, "inning": 1, "score": 10, "wickets": 0}
    models.Run.model_validate({**run, "overs": 4})
    models.Run.model_validate({**run, "overs": 3.4})


def test_wrapped_includes_are_unwrapped_to_the_bare_form(real_fixture_path: Path) -> None:
    raw = _load(real_fixture_path)
    wrapped = copy.deepcopy(raw)
    wrapped["data"]["runs"] = {"data": wrapped["data"]["runs"]}
    wrapped["data"]["localteam"] = {"data": wrapped["data"]["localteam"]}
    wrapped["data"]["balls"][0]["score"] = {"data": wrapped["data"]["balls"][0]["score"]}
    assert models.may_have_wrapped_includes(json.dumps(wrapped))
    unwrapped = models.unwrap_includes(wrapped)
    assert unwrapped == raw
    models.FixtureEnvelope.model_validate(unwrapped)


def test_unwrap_leaves_bare_payloads_untouched(real_fixture_path: Path) -> None:
    raw = _load(real_fixture_path)
    assert models.unwrap_includes(raw) is raw
    assert not models.may_have_wrapped_includes(real_fixture_path.read_bytes())


def test_field_path_formatting() -> None:
    assert models.field_path(("data", 0, "runs", 1, "score")) == "data[0].runs[1].score"
    assert models.field_path(()) == "payload"
