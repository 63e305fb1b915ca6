"""Token verification (pure) and the JWKS keys (fetched over HTTP from the local issuer on loopback)."""

from __future__ import annotations

import base64
import json
import time

import jwt
import pytest
import trio

from daemon.api.auth import Authenticator, JwksKeys, Principal, keys_from_jwks, verify_token
from daemon.api.errors import AuthError, UnknownKid
from daemon.api.settings import AuthSettings
from daemon.demo.issuer import LocalIssuer, new_key

CLIENT = "sightscreen-local-app"


@pytest.fixture(scope="module")
def iss() -> LocalIssuer:
    return LocalIssuer(issuer="https://issuer.test/pool")


def verify(iss: LocalIssuer, token: str, **kw: object) -> object:
    return verify_token(
        token,
        keys_from_jwks(iss.jwks()),
        issuer="https://issuer.test/pool",
        client_ids={CLIENT},
        leeway_s=5.0,
        **kw,
    )


def _b64(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def test_a_good_access_token_gives_its_sub_and_groups(iss: LocalIssuer) -> None:
    p = verify(iss, iss.mint("user-1", groups=["admin"]))
    assert p.sub == "user-1" and p.groups == ("admin",) and p.client_id == CLIENT


@pytest.mark.parametrize(
    "reason,mint",
    [
        ("expired", lambda i: i.mint("u", now=time.time() - 7200)),
        ("not_yet_valid", lambda i: i.mint("u", claims={"nbf": int(time.time()) + 600})),
        ("wrong_issuer", lambda i: i.mint("u", issuer="https://evil.test/pool")),
        ("wrong_client", lambda i: i.mint("u", client_id="another-app")),
        ("wrong_use", lambda i: i.mint("u", token_use="id")),
        ("missing_claim", lambda i: i.mint("u", drop=["client_id"])),
        ("missing_claim", lambda i: i.mint("u", drop=["exp"])),
        ("bad_signature", lambda i: i.mint("u", key=new_key(i.keys[0].kid))),
        ("bad_sub", lambda i: i.mint("a#b")),
    ],
)
def test_each_bad_token_is_refused_with_its_reason(iss: LocalIssuer, reason: str, mint: object) -> None:
    with pytest.raises(AuthError) as caught:
        verify(iss, mint(iss))  # type: ignore[operator]
    assert caught.value.reason == reason


def test_a_token_within_the_leeway_of_its_expiry_still_passes(iss: LocalIssuer) -> None:
    assert verify(iss, iss.mint("u", ttl_s=-2.0)).sub == "u"  # expired 2 s ago, leeway 5 s


def test_alg_none_is_refused(iss: LocalIssuer) -> None:
    claims = jwt.decode(iss.mint("u"), options={"verify_signature": False})
    token = f"{_b64({'alg': 'none', 'typ': 'JWT', 'kid': iss.keys[0].kid})}.{_b64(claims)}."
    with pytest.raises(AuthError) as caught:
        verify(iss, token)
    assert caught.value.reason in {"wrong_algorithm", "invalid"}


def test_an_hs256_token_signed_with_the_public_key_is_refused(iss: LocalIssuer) -> None:
    import hashlib
    import hmac

    claims = jwt.decode(iss.mint("u"), options={"verify_signature": False})
    head = _b64({"alg": "HS256", "typ": "JWT", "kid": iss.keys[0].kid})
    body = _b64(claims)
    sig = hmac.new(iss.keys[0].public_pem(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    token = f"{head}.{body}.{base64.urlsafe_b64encode(sig).rstrip(b'=').decode()}"
    with pytest.raises(AuthError) as caught:
        verify(iss, token)
    assert caught.value.reason == "wrong_algorithm"


def test_an_unknown_kid_is_its_own_error_so_the_caller_may_refetch(iss: LocalIssuer) -> None:
    with pytest.raises(UnknownKid) as caught:
        verify(iss, iss.mint("u", kid="made-up"))
    assert caught.value.kid == "made-up"


@pytest.mark.parametrize("token", ["", "abc", "a.b", "a.b.c", "x" * 9000])
def test_malformed_tokens_are_refused(iss: LocalIssuer, token: str) -> None:
    with pytest.raises(AuthError):
        verify(iss, token)


def test_jwks_keeps_only_rsa_signing_keys_with_a_kid(iss: LocalIssuer) -> None:
    rsa = iss.jwks()["keys"][0]
    doc = {
        "keys": [
            rsa,
            {**rsa, "kid": "enc-key", "use": "enc"},
            {**rsa, "kid": "ps-key", "alg": "PS256"},
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
            {**rsa, "kid": ""},
        ]
    }
    assert list(keys_from_jwks(doc)) == [rsa["kid"]]
    with pytest.raises(ValueError):
        keys_from_jwks({"keys": [{"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"}]})
    with pytest.raises(ValueError):
        keys_from_jwks({"nokeys": []})


# --- the JWKS over HTTP -----------------------------------------------------------------------------------


def _served() -> LocalIssuer:
    return LocalIssuer().serve()


async def test_an_unknown_kid_flood_costs_one_fetch_per_cooldown() -> None:
    with _served() as iss:
        settings = AuthSettings(
            issuer=iss.issuer, jwks_url=iss.jwks_url, client_ids=[iss.client_id], jwks_refetch_cooldown_s=0.5
        )
        keys = JwksKeys(iss.jwks_url, refresh_s=3600, refetch_cooldown_s=settings.jwks_refetch_cooldown_s)
        auth = Authenticator(keys, settings)
        await keys.fetch("start")
        assert iss.jwks_hits == 1

        async def one(i: int) -> None:
            with pytest.raises(AuthError):
                await auth.authenticate(f"Bearer {iss.mint('u', kid=f'made-up-{i}')}")

        async with trio.open_nursery() as n:
            for i in range(50):
                n.start_soon(one, i)
        assert iss.jwks_hits == 2  # one refetch for fifty made-up kids
        for i in range(20):
            await one(100 + i)
        assert iss.jwks_hits == 2
        await trio.sleep(0.6)
        await one(999)
        assert iss.jwks_hits == 3  # the cooldown passed: one more

        # a real rotation is picked up by the refetch of its first token (after the cooldown)
        await trio.sleep(0.6)
        iss.rotate()
        principal = await auth.authenticate(f"Bearer {iss.mint('rotated-user')}")
        assert principal.sub == "rotated-user"
        assert iss.jwks_hits == 4


async def test_a_failed_fetch_keeps_the_keys_it_had() -> None:
    with _served() as iss:
        keys = JwksKeys(iss.jwks_url, refresh_s=3600, refetch_cooldown_s=1)
        assert await keys.fetch("start")
        kids = set(keys.keys)
        iss.jwks_status = 500
        assert not await keys.fetch("refresh")
        assert set(keys.keys) == kids and keys.failures == 1


async def test_redirects_are_not_followed() -> None:
    with _served() as iss, _served() as elsewhere:
        iss.jwks_status = 302
        iss.jwks_redirect_to = elsewhere.jwks_url
        keys = JwksKeys(iss.jwks_url, refresh_s=3600, refetch_cooldown_s=1)
        assert not await keys.fetch("start")
        assert not keys.loaded
        assert elsewhere.jwks_hits == 0


async def test_the_background_refresh_picks_up_a_new_key_and_survives_failures() -> None:
    with _served() as iss:
        keys = JwksKeys(iss.jwks_url, refresh_s=1.0, refetch_cooldown_s=60, retry_s=1.0)
        async with trio.open_nursery() as n:
            await n.start(keys.run)
            first = set(keys.keys)
            iss.jwks_status = 500
            await trio.sleep(1.3)
            assert set(keys.keys) == first  # failed refresh, keys kept
            iss.jwks_status = 200
            new = iss.rotate()
            with trio.fail_after(5):
                while new.kid not in keys.keys:
                    await trio.sleep(0.1)
            n.cancel_scope.cancel()


async def test_a_verified_token_is_remembered_but_not_past_its_key() -> None:
    with _served() as served:
        settings = AuthSettings(issuer=served.issuer, jwks_url=served.jwks_url, client_ids=[served.client_id])
        keys = JwksKeys(served.jwks_url, refresh_s=3600, refetch_cooldown_s=60)
        await keys.fetch("start")
        auth = Authenticator(keys, settings)
        token = served.mint("u")
        assert (await auth.authenticate(f"Bearer {token}")).sub == "u"
        assert (await auth.authenticate(f"Bearer {token}")).sub == "u"
        served.keys = [new_key()]  # the issuer retires the key; the next refresh drops it
        await keys.fetch("refresh")
        with pytest.raises(AuthError):
            await auth.authenticate(f"Bearer {token}")


class CountingAuthenticator(Authenticator):
    """Counts the signature checks it makes (the memo's hits make none)."""

    verified = 0

    def _verify(self, token: str) -> Principal:
        self.verified += 1
        return super()._verify(token)


async def _authenticator(served: LocalIssuer, **settings: object) -> CountingAuthenticator:
    auth_settings = AuthSettings(
        issuer=served.issuer, jwks_url=served.jwks_url, client_ids=[served.client_id], **settings
    )
    keys = JwksKeys(served.jwks_url, refresh_s=3600, refetch_cooldown_s=60)
    await keys.fetch("start")
    return CountingAuthenticator(keys, auth_settings, memo_size=3)


async def test_a_token_is_verified_once_however_often_it_is_used() -> None:
    with _served() as served:
        auth = await _authenticator(served)
        token = served.mint("u")
        for _ in range(5):
            assert (await auth.authenticate(f"Bearer {token}")).sub == "u"
        assert auth.verified == 1


async def test_a_remembered_token_is_refused_once_it_expires() -> None:
    with _served() as served:
        auth = await _authenticator(served, leeway_s=0.0)
        token = served.mint("u", ttl_s=1.0)
        assert (await auth.authenticate(f"Bearer {token}")).sub == "u"
        exp = jwt.decode(token, options={"verify_signature": False})["exp"]
        await trio.sleep(max(0.0, exp - time.time()) + 0.1)
        with pytest.raises(AuthError) as refused:
            await auth.authenticate(f"Bearer {token}")
        assert refused.value.reason == "expired"


async def test_a_tampered_copy_of_a_remembered_token_is_verified_and_refused() -> None:
    with _served() as served:
        auth = await _authenticator(served)
        token = served.mint("u")
        assert (await auth.authenticate(f"Bearer {token}")).sub == "u"
        header, payload, signature = token.split(".")
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        forged_payload = _b64({**claims, "sub": "someone-else"})
        with pytest.raises(AuthError) as refused:
            await auth.authenticate(f"Bearer {header}.{forged_payload}.{signature}")
        assert refused.value.reason == "bad_signature" and auth.verified == 2


async def test_the_memo_of_verified_tokens_stays_bounded() -> None:
    with _served() as served:
        auth = await _authenticator(served)
        tokens = [served.mint(f"u{i}") for i in range(10)]
        for token in tokens:
            await auth.authenticate(f"Bearer {token}")
        assert len(auth._memo) <= 3
        assert (await auth.authenticate(f"Bearer {tokens[-1]}")).sub == "u9"  # the newest are kept
        assert auth.verified == 10
