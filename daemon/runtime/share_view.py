"""What ``ctl shares`` shows of the region's hot matches, read from ``cricket-locks``: the hot list, each hot
match's boards (the owner's current work item per lane) and every shard of those items: who holds it, until
when, its alert watermark, and once delivered its counts. Read-only; ``daemon.cricket.share`` says what each
field means."""

from __future__ import annotations

from typing import Any, Protocol

from daemon.cricket import share
from daemon.cricket.share import LANES, Board, ShardRecord
from daemon.store.locks import HotList, instance_of, shard_key


class ShareReads(Protocol):
    async def get_hot_list(self, region: str) -> HotList: ...

    async def get_share_boards(
        self, match_ids: list[str], lanes: tuple[str, ...]
    ) -> dict[tuple[str, str], dict[str, Any]]: ...

    async def get_shards(self, keys: list[str]) -> dict[str, dict[str, Any]]: ...


def _shard_row(index: int, record: ShardRecord | None, now: float) -> dict[str, Any]:
    if record is None:
        return {"shard": index, "state": "waiting"}
    row: dict[str, Any] = {
        "shard": index,
        "state": "done" if record.done else ("held" if record.expires_at > now else "free again"),
        "holder": instance_of(record.owner),
        "claims": record.epoch,
    }
    if record.handed is not None:
        row["handed"] = record.handed
    if record.done:
        row.update(record.counts)
    else:
        row["lease_left_s"] = round(record.expires_at - now, 2)
    return row


async def region_shares(locks: ShareReads, region: str, *, now: float) -> dict[str, Any]:
    """``{"hot": {match: entry}, "helpers": {instance: word_left_s}, "boards": {match: {lane: {...work item,
    shards: [...]}}}}``."""
    listed = await locks.get_hot_list(region)
    hot = listed.matches
    boards: dict[str, dict[str, Any]] = {}
    items = await locks.get_share_boards(sorted(hot), LANES) if hot else {}
    for (match_id, lane), item in sorted(items.items()):
        try:
            board = Board.from_item(item)
        except share.ShareError as exc:
            boards.setdefault(match_id, {})[lane] = {"error": str(exc)}
            continue
        work = board.work
        keys = [shard_key(match_id, lane, work.seq, i) for i in range(work.shards)]
        found = await locks.get_shards(keys)
        records = {i: ShardRecord.from_item(found[k]) for i, k in enumerate(keys) if k in found}
        rows = [_shard_row(i, records.get(i), now) for i in range(work.shards)]
        helpers = sorted({r["holder"] for r in rows if "holder" in r})
        kind = (
            f"{work.kind}{' (alert)' if work.alert else ''}" if isinstance(work, share.TickWork) else "start"
        )
        boards.setdefault(match_id, {})[lane] = {
            "owner": instance_of(board.owner),
            "lease_epoch": board.lease_epoch,
            "seq": work.seq,
            "kind": kind,
            "age_s": round(max(0.0, now - work.published_at), 2),
            "shards": len(rows),
            "done": sum(1 for r in rows if r["state"] == "done"),
            "helpers": helpers,
            "shard_list": rows,
        }
    return {
        "hot": {m: {**e, "owner": instance_of(str(e.get("owner", "")))} for m, e in sorted(hot.items())},
        # the engines that said they help, and how long their word is still good (negative: ran out)
        "helpers": {instance_of(h): round(until - now, 1) for h, until in sorted(listed.helpers.items())},
        "boards": boards,
    }
