"""The display answer encoded once per cache load (pure: no I/O): its ETag, its headers, 304 or 200."""

from __future__ import annotations

import pytest

from daemon.api.display import DisplayAnswer, etag_matches

BODY = b'{"matchId":"1","team":"neutral","displayState":{"score":"1/0"}}'


def test_the_answer_carries_length_type_etag_and_no_cache() -> None:
    answer = DisplayAnswer.encode(BODY)
    headers = dict(answer.headers)
    assert headers[b"content-length"] == str(len(BODY)).encode()
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"etag"] == answer.etag.encode() and answer.etag.startswith('"')
    assert headers[b"cache-control"] == b"private, no-cache"
    assert DisplayAnswer.encode(BODY).etag == answer.etag  # the same body, the same tag
    assert DisplayAnswer.encode(BODY.replace(b"1/0", b"2/0")).etag != answer.etag


@pytest.mark.parametrize(
    ("if_none_match", "matches"),
    [
        ("TAG", True),
        ("W/TAG", True),
        ('"a", TAG , "b"', True),
        ("*", True),
        (" * ", True),
        ('"a"', False),
        ("", False),
        ("TAGx", False),
        ("W/", False),
    ],
)
def test_if_none_match_compares_weakly_with_lists_and_star(if_none_match: str, matches: bool) -> None:
    etag = DisplayAnswer.encode(BODY).etag
    assert etag_matches(if_none_match.replace("TAG", etag), etag) is matches


def test_a_matching_if_none_match_gets_304_without_a_body_and_any_other_the_answer() -> None:
    answer = DisplayAnswer.encode(BODY)
    status, headers, body = answer.messages(answer.etag)
    assert (status, body) == (304, b"")
    assert dict(headers) == {b"etag": answer.etag.encode(), b"cache-control": b"private, no-cache"}
    assert answer.messages(None) == (200, answer.headers, BODY)
    assert answer.messages('"stale"') == (200, answer.headers, BODY)
