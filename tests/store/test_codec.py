"""The plain-value <-> DynamoDB attribute codec and the update builder (pure, no I/O)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.store.codec import UpdateBuilder, from_attr, from_item, iso, to_attr, to_item

plain = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False, min_value=-1e100, max_value=1e100).filter(
        lambda f: f == 0 or abs(f) > 1e-100
    )
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=12,
)


def _normal(v):  # integral floats come back as int by design, so compare numbers by value
    if isinstance(v, int | float) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, list):
        return [_normal(x) for x in v]
    if isinstance(v, dict):
        return {k: _normal(x) for k, x in v.items()}
    return v


@settings(max_examples=60, deadline=None)
@given(plain)
def test_plain_values_round_trip_with_integral_numbers_as_int(value):
    assert _normal(from_attr(to_attr(value))) == _normal(value)


def test_numbers_come_back_as_int_or_float_never_decimal():
    item = from_item(to_item({"a": 3, "b": 2.5, "c": 4.0, "d": Decimal("1.10"), "e": {"f": [0.1, 7]}}))
    assert item == {"a": 3, "b": 2.5, "c": 4, "d": 1.1, "e": {"f": [0.1, 7]}}
    assert type(item["a"]) is int and type(item["b"]) is float and type(item["c"]) is int
    assert type(item["e"]["f"][0]) is float


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=5), plain, max_size=6))
def test_items_round_trip_and_strings_take_the_short_path_unchanged(item):
    assert _normal(from_item(to_item(item))) == _normal(item)


def test_an_item_value_that_is_not_one_typed_value_is_an_error_even_with_a_string_in_it():
    assert from_item({"a": {"S": ""}, "b": {"S": "x"}}) == {"a": "", "b": "x"}
    with pytest.raises(ValueError):
        from_item({"a": {"S": "x", "N": "1"}})
    with pytest.raises(ValueError, match="unknown DynamoDB attribute type"):
        from_item({"a": {"X": "x"}})


def test_float_is_stored_as_its_shortest_repr():
    assert to_attr(0.1) == {"N": "0.1"}


def test_bool_is_not_stored_as_number():
    assert to_attr(True) == {"BOOL": True}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"score": {"rr": float("nan")}}, "score.rr"),
        ({"overs": [1.0, float("inf")]}, r"overs\[1\]"),
        ({"tags": set()}, "tags: an empty set"),
        ({"m": {1: "x"}}, "m: map key 1"),
        ({"o": object()}, "o: values of type object"),
    ],
)
def test_unstorable_values_raise_naming_the_field(value, message):
    with pytest.raises(ValueError, match=message):
        to_item(value)


def test_sets_round_trip():
    assert from_attr(to_attr({"a", "b"})) == {"a", "b"}
    assert from_attr(to_attr({1, 2.5})) == {1, 2.5}


def test_iso_is_utc_with_milliseconds():
    assert iso(0) == "1970-01-01T00:00:00.000Z"
    assert iso(1.2345) == "1970-01-01T00:00:01.234Z"


def test_iso_in_seconds_is_the_sortable_start_time_form_from_any_moment():
    stamp = "2027-01-15T08:00:00Z"
    assert iso(1_800_000_000 - 0.5, timespec="seconds") == "2027-01-15T07:59:59Z"
    assert iso(1_800_000_000, timespec="seconds") == stamp
    aware = datetime(2027, 1, 15, 9, 0, tzinfo=timezone(timedelta(hours=1)))
    assert iso(aware, timespec="seconds") == stamp
    assert iso(datetime(2027, 1, 15, 8, 0), timespec="seconds") == stamp  # naive is UTC


def test_update_builder_uses_placeholders_and_none_removes():
    u = UpdateBuilder().fields({"status": "x", "ttl": None}).add("n", 1)
    kw = u.kwargs("attribute_exists(" + u.name("matchId") + ")")
    assert kw["UpdateExpression"] == "SET #n0 = :v0 REMOVE #n1 ADD #n2 :v1"
    assert kw["ExpressionAttributeNames"] == {"#n0": "status", "#n1": "ttl", "#n2": "n", "#n3": "matchId"}
    assert kw["ConditionExpression"] == "attribute_exists(#n3)"


def test_update_builder_refuses_named_attributes():
    with pytest.raises(ValueError, match="ownerEpoch"):
        UpdateBuilder().fields({"ownerEpoch": 3}, refuse=("ownerEpoch",))


def test_empty_update_is_an_error():
    with pytest.raises(ValueError, match="at least one attribute"):
        UpdateBuilder().kwargs()
