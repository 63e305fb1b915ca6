"""Provider tokens: ES256 signatures APNs would accept, and Apple's timing rules with an injected clock."""

from __future__ import annotations

import jwt
import pytest

from daemon.apns.token import (
    ProviderTokenPolicy,
    ProviderTokens,
    generate_signing_key,
    load_signing_key,
)
from tests.doubles import Clock

TEAM, KID = "TEAM123456", "KEY1234567"


@pytest.fixture(scope="module")
def keypair() -> tuple[str, str]:
    return generate_signing_key()


def make_tokens(keypair: tuple[str, str], clock: Clock) -> ProviderTokens:
    return ProviderTokens(load_signing_key(keypair[0]), team_id=TEAM, key_id=KID, clock=clock)


def test_token_is_es256_with_kid_iss_and_iat_and_verifies_with_the_public_key(
    keypair: tuple[str, str],
) -> None:
    clock = Clock(1_700_000_000.0)
    token = make_tokens(keypair, clock).current()
    header = jwt.get_unverified_header(token.jwt)
    assert header["alg"] == "ES256" and header["kid"] == KID
    claims = jwt.decode(token.jwt, keypair[1], algorithms=["ES256"], options={"verify_iat": False})
    assert claims == {"iss": TEAM, "iat": int(clock.now)}
    assert token.authorization == b"bearer " + token.jwt.encode()


def test_one_token_is_reused_until_fifty_minutes_then_refreshed(keypair: tuple[str, str]) -> None:
    clock = Clock(1_700_000_000.0)
    tokens = make_tokens(keypair, clock)
    first = tokens.current()
    clock.advance(49 * 60)
    assert tokens.current() is first
    clock.advance(61)
    second = tokens.current()
    assert second.jwt != first.jwt and second.issued_at == int(clock.now)
    assert tokens.minted == 2


def test_connection_keeps_its_token_within_twenty_minutes_of_its_last_switch(
    keypair: tuple[str, str],
) -> None:
    clock = Clock(1_700_000_000.0)
    tokens = make_tokens(keypair, clock)
    adopted = tokens.for_connection(None, None)
    assert adopted.switched
    switched_at = clock.now
    clock.advance(50 * 60)  # the shared token rotates
    tokens.current()
    clock.advance(-31 * 60)  # (rewind for the scenario: 19 min after the switch, a new token exists)
    choice = tokens.for_connection(adopted.token, switched_at)
    assert not choice.switched and choice.token is adopted.token


def test_connection_switches_once_twenty_minutes_passed_and_a_newer_token_exists(
    keypair: tuple[str, str],
) -> None:
    clock = Clock(1_700_000_000.0)
    tokens = make_tokens(keypair, clock)
    first = tokens.for_connection(None, None)
    switched_at = clock.now
    clock.advance(30 * 60)
    assert not tokens.for_connection(first.token, switched_at).switched  # no newer token yet
    clock.advance(21 * 60)  # 51 min: a new token is minted and the connection may switch
    choice = tokens.for_connection(first.token, switched_at)
    assert choice.switched and choice.token.jwt != first.token.jwt


def test_new_connection_never_adopts_a_token_that_could_expire_before_it_may_switch(
    keypair: tuple[str, str],
) -> None:
    clock = Clock(1_700_000_000.0)
    tokens = make_tokens(keypair, clock)
    old = tokens.current()
    clock.advance(45 * 60)  # old is 45 min old: held 20 more minutes it would pass the hour
    choice = tokens.for_connection(None, None)
    assert choice.switched and choice.token.jwt != old.jwt and choice.token.age(clock.now) == 0


def test_every_token_on_a_connection_stays_under_an_hour_old_over_a_day(keypair: tuple[str, str]) -> None:
    # A connection polling once a minute for 24 hours: its token is never >= 60 min old, and it never
    # switches within 20 minutes of its previous switch.
    clock = Clock(1_700_000_000.0)
    tokens = make_tokens(keypair, clock)
    policy = ProviderTokenPolicy()
    held, switched_at, switches = None, None, []
    for _ in range(24 * 60):
        choice = tokens.for_connection(held, switched_at)
        assert not choice.recycle
        if choice.switched:
            switches.append(clock.now)
            held, switched_at = choice.token, clock.now
        assert held is not None and held.age(clock.now) < policy.max_age_s
        clock.advance(60)
    assert all(b - a >= policy.min_switch_interval_s for a, b in zip(switches, switches[1:], strict=False))
    assert 24 <= len(switches) <= 40


def test_invalidated_token_is_replaced_on_next_use(keypair: tuple[str, str]) -> None:
    clock = Clock(1_700_000_000.0)
    tokens = make_tokens(keypair, clock)
    first = tokens.current()
    tokens.invalidate(first)
    clock.advance(1)
    assert tokens.current().jwt != first.jwt


def test_tokens_minted_in_the_same_second_still_differ(keypair: tuple[str, str]) -> None:
    clock = Clock(1_700_000_000.0)
    tokens = make_tokens(keypair, clock)
    first = tokens.current()
    tokens.invalidate(first)
    second = tokens.current()
    assert second.issued_at > first.issued_at and second.jwt != first.jwt


def test_bad_key_material_gets_a_clear_error_without_the_key() -> None:
    with pytest.raises(ValueError, match="not a PEM-encoded private key"):
        load_signing_key("-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n")


def test_team_and_key_ids_must_be_ten_characters(keypair: tuple[str, str]) -> None:
    with pytest.raises(ValueError, match="10 characters"):
        ProviderTokens(load_signing_key(keypair[0]), team_id="SHORT", key_id=KID)
