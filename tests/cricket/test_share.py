"""The shared fan-out's decisions (``daemon.cricket.share``), pure: shard bounds and membership, the board and
shard records as stored and read back (bad ones refused by name), which keys of a shard get the alert when its
delivery is taken up from a watermark, and a model of a hot match's work item delivered by engines that die at
any moment: no key is ever alerted twice, every key gets the update, and a routine item leaves no key unpushed.

The model follows the shard runner (``actors.shard``): a delivery reads the shard's watermark as its record
holds it, hands the quiet keys over, then each alerting chunk only after the chunk's watermark is written;
a chunk is handed over only once every push before it was answered (``actors.fanout``'s gates), so a delivery
killed at any point leaves at most its chunk in flight uncertain: each of its pushes may or may not have
reached its device. The next delivery (another helper, or the owner, or the owner's successor continuing the
same item) starts from the watermark the record holds.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.cricket.intent import AlertIntent, IntentError, has_alert
from daemon.cricket.share import (
    TICK,
    Board,
    ShardRecord,
    ShareError,
    StartWork,
    TickWork,
    claim_order,
    claimable,
    done_fields,
    first_claim,
    in_shard,
    is_hot,
    longest_wait,
    next_seq,
    plan_bounds,
    shard_count,
    shard_index,
    shard_keys,
    shard_plan,
    shard_range,
    shard_slice,
    summed,
    tick_of_intent,
)


def _payload(alert: bool) -> bytes:
    aps: dict[str, object] = {"timestamp": 100, "event": "update", "content-state": {"score": "1/0"}}
    if alert:
        aps["alert"] = {"title": "WICKET!", "body": "b"}
    return json.dumps({"aps": aps}, separators=(",", ":")).encode()


def _tick(bounds: tuple[str, ...] = ("k3",), *, alert: bool = True) -> TickWork:
    return TickWork(
        seq=1_700_000_000_000,
        kind="update",
        priority=10 if alert else 5,
        payloads={"neutral": _payload(alert), "39": _payload(alert)},
        alert=alert,
        bounds=bounds,
        published_at=10.5,
        collapse_id="m:wicket" if alert else None,
        stamp=100 if alert else None,
    )


# --- shards ------------------------------------------------------------------------------------------------


def test_bounds_cut_the_keys_into_even_shards_of_at_most_the_size() -> None:
    keys = [f"u{i:03d}#d" for i in range(10)]
    bounds = plan_bounds(reversed(keys), 4)
    assert bounds == ("u002#d", "u005#d")  # three shards of 3, 3 and 4
    assert [len(shard_keys(keys, bounds, i)) for i in range(shard_count(bounds))] == [3, 3, 4]
    assert plan_bounds(keys, 10) == () and plan_bounds([], 5) == ()
    with pytest.raises(ValueError, match="shard_size"):
        plan_bounds(keys, 0)
    with pytest.raises(ValueError, match="empty key"):
        plan_bounds(["", "a"], 2)


def _keys(most: int) -> st.SearchStrategy[list[str]]:
    """Session keys as an owner's or a helper's view holds them: short, from a few letters, so they collide
    and straddle the bounds."""
    return st.lists(st.text(alphabet="abc#0", min_size=1, max_size=5), max_size=most)


SHARD_SIZES = st.integers(min_value=1, max_value=20)


@given(_keys(60), SHARD_SIZES, _keys(40))
def test_a_shards_slice_of_the_sorted_keys_is_its_keys_whoever_cut_the_bounds(
    keys: list[str], size: int, view: list[str]
) -> None:
    """A helper bisects its own sorted view (which may hold keys the owner's did not) for a shard's keys:
    the same keys as a pass over every key, each shard's in order."""
    bounds = plan_bounds(keys, size)
    ordered = sorted(set(view))
    for i in range(shard_count(bounds)):
        assert list(shard_slice(ordered, bounds, i)) == shard_keys(view, bounds, i)


@given(_keys(60), SHARD_SIZES, _keys(20))
def test_every_key_belongs_to_exactly_one_shard_whoever_reads_the_audience(
    keys: list[str], size: int, others: list[str]
) -> None:
    """A helper's view may hold keys the owner's did not (sessions registered since): every key, known to the
    owner or not, falls in exactly one shard, the one ``shard_index`` names."""
    bounds = plan_bounds(keys, size)
    n = shard_count(bounds)
    assert n == max(1, -(-len(set(keys)) // size))
    assert all(len(shard_keys(keys, bounds, i)) <= size for i in range(n))
    for key in set(keys) | set(others):
        owners = [i for i in range(n) if in_shard(key, *shard_range(bounds, i))]
        assert owners == [shard_index(key, bounds)]


def test_shard_range_names_the_open_ends() -> None:
    assert shard_range(("b", "d"), 0) == (None, "b")
    assert shard_range(("b", "d"), 1) == ("b", "d")
    assert shard_range(("b", "d"), 2) == ("d", None)
    with pytest.raises(ValueError, match="3 shards"):
        shard_range(("b", "d"), 3)


def test_claim_order_starts_anywhere_and_covers_every_shard() -> None:
    assert claim_order(4, 2) == [2, 3, 0, 1]
    assert claim_order(0, 0) == []


def test_a_lanes_seq_only_grows_even_after_its_board_is_gone() -> None:
    assert next_seq(None, 5_000) == 5_000
    assert next_seq(9_000, 5_000) == 9_001  # a clock behind the last item's: still above it
    assert next_seq(4_000, 5_000) == 5_000


def test_hot_with_hysteresis_and_never_when_off() -> None:
    assert not is_hot(100, was_hot=False, share_above=100, cool_below=0.8)
    assert is_hot(101, was_hot=False, share_above=100, cool_below=0.8)
    assert is_hot(80, was_hot=True, share_above=100, cool_below=0.8)  # stays hot down to 80
    assert not is_hot(79, was_hot=True, share_above=100, cool_below=0.8)
    assert not is_hot(10**6, was_hot=True, share_above=0, cool_below=0.8)


# --- the alert on a resumed shard ---------------------------------------------------------------------------


def test_a_resumed_shard_pushes_up_to_its_watermark_without_the_alert_and_above_it_with() -> None:
    keys = [f"k{i}" for i in range(10)]
    fresh = shard_plan(keys, None, first=2, most=4)
    assert fresh.quiet == () and [len(c.keys) for c in fresh.chunks] == [2, 4, 4]
    resumed = shard_plan(keys, "k5", first=2, most=4)
    assert resumed.quiet == ("k0", "k1", "k2", "k3", "k4", "k5")
    assert [c.keys for c in resumed.chunks] == [("k6", "k7"), ("k8", "k9")]
    assert [c.watermark for c in resumed.chunks] == ["k7", "k9"]


# --- records as stored -------------------------------------------------------------------------------------


def test_a_board_round_trips_and_carries_the_exact_payloads() -> None:
    work = _tick(("k3", "k7"))
    board = Board("77", TICK, owner="i1#a", lease_epoch=4, owner_epoch=2, work=work)
    back = Board.from_item(json.loads(json.dumps(board.to_item())))
    assert back == board
    assert isinstance(back.work, TickWork) and back.work.shards == 3
    assert back.work.payload_for("39", alert=True) == work.payloads["39"]
    assert has_alert(back.work.payload_for("39", alert=True))
    assert not has_alert(back.work.payload_for("39", alert=False))
    routine = _tick(alert=False)
    assert routine.payload_for("neutral", alert=False) == routine.payloads["neutral"]


def test_a_start_board_round_trips() -> None:
    work = StartWork(
        seq=5,
        bounds=("u5",),
        published_at=1.0,
        timestamp=100,
        attributes={"matchId": "77"},
        content={"neutral": {"title": "A v B"}, "39": {"title": "B"}},
        channels={"neutral": "ch-n"},
    )
    board = Board("77", "start", owner="i1#a", lease_epoch=4, owner_epoch=2, work=work)
    assert Board.from_item(json.loads(json.dumps(board.to_item()))) == board


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda i: i.pop("owner"), "board.owner: missing"),
        (lambda i: i.update(lane="side"), "board.lane"),
        (lambda i: i["work"].update(kind="start"), "tick.kind"),
        (lambda i: i["work"].update(payloads={}), "tick.payloads"),
        (lambda i: i["work"].update(bounds=["b", "a"]), "tick.bounds"),
        (lambda i: i["work"].pop("seq"), "tick.seq: missing"),
        (lambda i: i.update(work="nope"), "tick: expected a map"),
        (lambda i: i.update(leaseEpoch="four"), "board"),
    ],
)
def test_a_board_that_does_not_hold_together_is_refused_by_name(change: object, message: str) -> None:
    item = json.loads(json.dumps(Board("77", TICK, "i1#a", 4, 2, _tick()).to_item()))
    change(item)  # type: ignore[operator]
    with pytest.raises(ShareError, match=message):
        Board.from_item(item)


def test_a_shard_record_reads_its_lease_watermark_and_counts() -> None:
    record = ShardRecord.from_item(
        {"owner": "i2#b", "epoch": 2, "expiresAt": 50.0, "handed": "k4", "acquiredAt": 45.0}
    )
    assert (record.epoch, record.handed, record.done) == (2, "k4", False)
    assert claimable(record, 51.0) and not claimable(record, 49.0) and claimable(None, 0.0)
    done = ShardRecord.from_item(
        {"owner": "i2#b", "epoch": 2, "expiresAt": 9e9, **done_fields({"accepted": 3}, 4, 60.0)}
    )
    assert done.done and not claimable(done, 10**10)
    assert summed([done, done]) == (8, {"accepted": 6, "rejected": 0, "failed": 0})
    with pytest.raises(ShareError, match="shard.owner"):
        ShardRecord.from_item({"epoch": 1})


def test_the_longest_wait_counts_a_shard_not_taken_yet_to_now() -> None:
    first = ShardRecord("a", 1, 0.0, acquired_at=11.0)
    again = ShardRecord("a", 2, 0.0, acquired_at=30.0)
    assert first_claim(first, 20.0) == 11.0
    assert first_claim(again, 20.0) == 20.0  # its first claim was by another: when first seen
    assert first_claim(None, 20.0) is None
    assert longest_wait(10.0, {0: 11.0, 1: 10.5}, 2, 40.0) == 1.0
    assert longest_wait(10.0, {0: 11.0}, 2, 40.0) == 30.0


def test_an_intent_records_its_work_item_and_a_successor_rebuilds_it() -> None:
    intent = AlertIntent(
        kind="update",
        timestamp=100,
        priority=10,
        events=("wicket:S1:9",),
        payloads={"neutral": _payload(True)},
        collapse_id="77:wicket",
        share_seq=42,
        share_bounds=("k3", "k7"),
    )
    back = AlertIntent.from_record({"alertIntent": json.loads(json.dumps(intent.to_item()))})
    assert back is not None and (back.share_seq, back.share_bounds) == (42, ("k3", "k7"))
    work = tick_of_intent(back, published_at=5.0)
    assert (work.seq, work.bounds, work.alert, work.stamp, work.collapse_id) == (
        42,
        ("k3", "k7"),
        True,
        100,
        "77:wicket",
    )
    with pytest.raises(IntentError, match="share"):
        AlertIntent.from_record({"alertIntent": {**intent.to_item(), "share": "42"}})
    unshared = AlertIntent.from_record({"alertIntent": {**intent.to_item(), "share": None}})
    assert unshared is not None and unshared.share_seq is None
    with pytest.raises(ShareError, match="not shared"):
        tick_of_intent(unshared, published_at=1.0)


# --- a work item delivered by engines that die ----------------------------------------------------------------


class Device:
    """What each session's device was shown: alerts and updates (with or without an alert)."""

    def __init__(self) -> None:
        self.alerts: dict[str, int] = {}
        self.updates: dict[str, int] = {}

    def reach(self, key: str, alert: bool) -> None:
        self.updates[key] = self.updates.get(key, 0) + 1
        if alert:
            self.alerts[key] = self.alerts.get(key, 0) + 1


def _deliver(
    keys: list[str],
    record: dict[str, str | None],
    *,
    alert: bool,
    kill_at: int | None,
    reached: list[bool],
    device: Device,
    first: int,
    most: int,
) -> bool:
    """One delivery of one shard (as ``actors.shard`` runs it), killed before its ``kill_at``-th step (None:
    it completes). A step is a hand-off of a segment (the quiet keys, a chunk, or the whole routine shard);
    before each alerting chunk the watermark is written to ``record`` (it lands before the chunk is handed).
    The segment in flight when the delivery dies reached each device or not, as ``reached`` says; every
    earlier segment was answered (the gate waited for it). True when the delivery completed."""
    if alert:
        plan = shard_plan(keys, record["handed"], first=first, most=most)
        segments: list[tuple[list[str], bool, str | None]] = [(list(plan.quiet), False, None)]
        segments += [(list(c.keys), True, c.watermark) for c in plan.chunks]
    else:
        segments = [(list(keys), False, None)]
    draws = iter(reached)
    for step, (segment, alerting, mark) in enumerate(segments):
        if mark is not None:
            record["handed"] = mark  # the gate: persisted before the chunk is handed over
        last = kill_at is not None and step == kill_at
        for key in segment:
            if not last or next(draws, True):
                device.reach(key, alerting)
        if last:
            return False  # killed with this segment in flight
    return True


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(min_value=0, max_value=60),
    size=st.integers(min_value=1, max_value=25),
    alert=st.booleans(),
    first=st.integers(min_value=1, max_value=4),
    extra=st.integers(min_value=0, max_value=8),
    kills=st.lists(st.lists(st.integers(min_value=0, max_value=12), max_size=4), max_size=8),
    reached=st.lists(st.booleans(), max_size=200),
)
def test_any_sequence_of_kills_and_resumes_alerts_no_key_twice_and_leaves_no_key_unpushed(
    n: int, size: int, alert: bool, first: int, extra: int, kills: list[list[int]], reached: list[bool]
) -> None:
    """A work item of ``n`` sessions in shards of ``size``; shard ``i`` is delivered by a run of deliveries
    killed at the steps ``kills[i]`` (each by another engine, or by the owner's successor continuing the same
    item), then one that completes. Whatever the kills: every key got the update, none got the alert twice,
    and the keys without the alert are at most the kills' chunks in flight."""
    most = first + extra
    keys = [f"u{i:03d}#d" for i in range(n)]
    bounds = plan_bounds(keys, size)
    device = Device()
    killed = 0
    for index in range(shard_count(bounds)):
        own = shard_keys(keys, bounds, index)
        record: dict[str, str | None] = {"handed": None}
        for kill_at in (kills[index] if index < len(kills) else []) + [None]:
            done = _deliver(
                own,
                record,
                alert=alert,
                kill_at=kill_at,
                reached=reached,
                device=device,
                first=first,
                most=most,
            )
            killed += not done
            if done:
                break
    assert set(device.updates) == set(keys), "every key got the update"
    if alert:
        assert all(v == 1 for v in device.alerts.values()), "no key was alerted twice"
        assert len(set(keys) - set(device.alerts)) <= killed * most, "at most the chunk in flight per kill"
    else:
        assert device.alerts == {}
