"""The server's sans-I/O core: request validation, provider tokens, token churn, fault bookkeeping."""

from __future__ import annotations

import json
import time

import pytest

from daemon.apns.certs import generate_signing_key, make_provider_token
from daemon.apns.server import (
    ConnectionAuth,
    FaultScript,
    FaultState,
    ProviderTokenVerifier,
    TokenCheck,
    Verdict,
    error_body,
    headers_to_dict,
    normalize_topics,
    validate_headers,
    validate_payload,
    validate_target,
)

TOPICS = normalize_topics(["com.example.app"])
TEAM = "TEAM000001"


def la(**aps_overrides) -> bytes:
    aps = {"timestamp": 1_700_000_000, "event": "update", "content-state": {"score": "1/0"}}
    aps.update(aps_overrides)
    return json.dumps({"aps": {k: v for k, v in aps.items() if v is not None}}).encode()


def headers(**overrides) -> dict[str, str]:
    base = {
        "apns-push-type": "liveactivity",
        "apns-topic": "com.example.app.push-type.liveactivity",
        "apns-priority": "10",
    }
    base.update({k.replace("_", "-"): v for k, v in overrides.items()})
    return {k: v for k, v in base.items() if v is not None}


@pytest.mark.parametrize(
    ("method", "path", "status", "reason"),
    [
        ("POST", "/3/device/abcd", None, None),
        ("POST", "/3/device/" + "0F" * 80, None, None),
        ("POST", "/3/devices/abcd", 404, "BadPath"),
        ("POST", "/2/device/abcd", 404, "BadPath"),
        ("POST", "/3/device/ab/cd", 404, "BadPath"),
        ("GET", "/3/device/abcd", 405, "MethodNotAllowed"),
        ("POST", "/3/device/", 400, "MissingDeviceToken"),
        ("POST", "/3/device/xyz0", 400, "BadDeviceToken"),
        ("POST", "/3/device/abc", 400, "BadDeviceToken"),
    ],
)
def test_target_rules(method, path, status, reason):
    _, verdict = validate_target(method, path)
    if status is None:
        assert verdict is None
    else:
        assert verdict is not None and (verdict.status, verdict.reason) == (status, reason)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({}, None),
        ({"apns_priority": "5"}, None),
        ({"apns_priority": "1"}, None),
        ({"apns_priority": None}, None),
        ({"apns_priority": "7"}, "BadPriority"),
        ({"apns_push_type": None}, "InvalidPushType"),
        ({"apns_push_type": "banana"}, "InvalidPushType"),
        ({"apns_topic": None}, "MissingTopic"),
        ({"apns_topic": "com.other.app.push-type.liveactivity"}, "TopicDisallowed"),
        ({"apns_topic": "com.example.app"}, "DeviceTokenNotForTopic"),
        ({"apns_push_type": "alert"}, "DeviceTokenNotForTopic"),
        ({"apns_push_type": "alert", "apns_topic": "com.example.app"}, None),
        ({"apns_push_type": "background", "apns_topic": "com.example.app"}, "BadPriority"),
        ({"apns_push_type": "background", "apns_topic": "com.example.app", "apns_priority": "5"}, None),
        ({"apns_push_type": "voip", "apns_topic": "com.example.app.voip"}, None),
        ({"apns_expiration": "0"}, None),
        ({"apns_expiration": "1700000000"}, None),
        ({"apns_expiration": "soon"}, "BadExpirationDate"),
        ({"apns_expiration": "-5"}, "BadExpirationDate"),
        ({"apns_collapse_id": "c" * 64}, None),
        ({"apns_collapse_id": "c" * 65}, "BadCollapseId"),
        ({"apns_collapse_id": "é" * 33}, "BadCollapseId"),  # 66 bytes in UTF-8
        ({"apns_id": "123e4567-e89b-12d3-a456-426614174000"}, None),
        ({"apns_id": "123e4567e89b12d3a456426614174000"}, "BadMessageId"),
        ({"apns_id": "not-a-uuid"}, "BadMessageId"),
    ],
)
def test_header_rules(overrides, reason):
    verdict = validate_headers(headers(**overrides), TOPICS)
    assert (verdict.reason if verdict else None) == reason
    if verdict is not None:
        assert verdict.status == 400


def test_topics_given_with_a_suffix_allow_their_bundle():
    assert normalize_topics(["com.example.app.push-type.liveactivity"]) == TOPICS


@pytest.mark.parametrize(
    ("push_type", "body", "status", "reason"),
    [
        ("liveactivity", la(), None, None),
        ("liveactivity", b"", 400, "PayloadEmpty"),
        ("liveactivity", b"{not json", 400, "BadPayload"),
        ("liveactivity", b"[1, 2]", 400, "BadPayload"),
        ("liveactivity", b'{"other": 1}', 400, "BadPayload"),
        ("liveactivity", la(timestamp=None), 400, "BadPayload"),
        ("liveactivity", la(timestamp="now"), 400, "BadPayload"),
        ("liveactivity", la(event="events"), 400, "BadPayload"),
        ("liveactivity", la(**{"content-state": None}), 400, "BadPayload"),
        ("liveactivity", la(event="start"), 400, "BadPayload"),
        (
            "liveactivity",
            la(event="start", alert={"title": "t"}, attributes={}, **{"attributes-type": "A"}),
            None,
            None,
        ),
        ("liveactivity", la(event="end", **{"dismissal-date": 1_700_000_100}), None, None),
        ("liveactivity", la(**{"stale-date": "tomorrow"}), 400, "BadPayload"),
        ("alert", b'{"aps": {"alert": "hi"}}', None, None),
        ("alert", b'{"aps": 3}', 400, "BadPayload"),
    ],
)
def test_payload_rules(push_type, body, status, reason):
    _, verdict = validate_payload(push_type, body, parse=True)
    if status is None:
        assert verdict is None
    else:
        assert verdict is not None and (verdict.status, verdict.reason) == (status, reason)


def test_payload_size_limit_is_4096_bytes_except_voip_5120():
    exactly = b'{"aps":{"alert":"' + b"x" * (4096 - 20) + b'"}}'
    assert len(exactly) == 4096
    assert validate_payload("alert", exactly, parse=True)[1] is None
    over = exactly[:-3] + b'x"}}'
    assert len(over) == 4097
    verdict = validate_payload("alert", over, parse=True)[1]
    assert verdict == Verdict(413, "PayloadTooLarge", verdict.detail)
    assert validate_payload("voip", over, parse=True)[1] is None


def test_fast_mode_checks_size_and_emptiness_but_not_json():
    assert validate_payload("liveactivity", b"{not json", parse=False) == (None, None)
    assert validate_payload("liveactivity", b"", parse=False)[1].reason == "PayloadEmpty"
    assert validate_payload("liveactivity", b"x" * 4097, parse=False)[1].reason == "PayloadTooLarge"


def test_duplicate_headers_are_found():
    raw = [(b":path", b"/3/device/ab"), (b"apns-topic", b"a"), (b"apns-topic", b"b")]
    _, duplicate = headers_to_dict(raw)
    assert duplicate == "apns-topic"
    assert headers_to_dict(raw[:2])[1] is None


def test_error_body_has_millisecond_timestamp_only_for_410():
    assert json.loads(error_body(Verdict(400, "BadDeviceToken"))) == {"reason": "BadDeviceToken"}
    body = json.loads(error_body(Verdict(410, "Unregistered")))
    assert body["reason"] == "Unregistered"
    assert abs(body["timestamp"] - time.time() * 1000) < 60_000
    assert json.loads(error_body(Verdict(410, "Unregistered"), timestamp_ms=123))["timestamp"] == 123


class TestProviderTokens:
    key = generate_signing_key("KEY0000001")

    def verifier(self) -> ProviderTokenVerifier:
        return ProviderTokenVerifier(TEAM, {self.key.key_id: self.key.public_pem})

    def test_valid_token_reports_kid_and_iat(self):
        now = time.time()
        token = make_provider_token(self.key, TEAM, iat=int(now))
        check = self.verifier().check(f"bearer {token}", now)
        assert check.valid and check.kid == "KEY0000001" and check.iat == int(now)

    def test_token_expires_an_hour_after_iat_even_when_cached(self):
        verifier = self.verifier()
        iat = 1_700_000_000
        auth = "bearer " + make_provider_token(self.key, TEAM, iat=iat)
        assert verifier.check(auth, iat + 3600).valid
        assert verifier.check(auth, iat + 3601).reason == "ExpiredProviderToken"

    def test_missing_or_non_bearer_authorization_is_missing_provider_token(self):
        assert self.verifier().check(None, 0).reason == "MissingProviderToken"
        assert self.verifier().check("basic abc", 0).reason == "MissingProviderToken"

    def test_hs256_token_is_invalid(self):
        import jwt

        token = jwt.encode(
            {"iss": TEAM, "iat": int(time.time())},
            "k" * 32,
            algorithm="HS256",
            headers={"kid": self.key.key_id},
        )
        assert self.verifier().check(f"bearer {token}", time.time()).reason == "InvalidProviderToken"

    def test_tampered_claims_fail_the_signature(self):
        import base64

        token = make_provider_token(self.key, TEAM)
        head, _, sig = token.split(".")
        claims = base64.urlsafe_b64encode(json.dumps({"iss": TEAM, "iat": 1}).encode()).rstrip(b"=").decode()
        check = self.verifier().check(f"bearer {head}.{claims}.{sig}", time.time())
        assert check.reason == "InvalidProviderToken"

    def test_non_ec_public_key_is_refused_at_construction(self):
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        pem = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            .public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        with pytest.raises(ValueError, match="RSAKEY"):
            ProviderTokenVerifier(TEAM, {"RSAKEY": pem})


class TestConnectionAuth:
    def check(self, token: str, kid: str = "K1") -> TokenCheck:
        return TokenCheck(token, kid, 1)

    def test_first_valid_token_is_adopted_and_reused_freely(self):
        auth = ConnectionAuth()
        for _ in range(3):
            assert auth.admit(self.check("A"), 10.0, min_interval_s=1200, pin_key=True) is None
        assert auth.adoptions == 1

    def test_switching_token_within_interval_is_churn_and_poisons_the_connection(self):
        auth = ConnectionAuth()
        auth.admit(self.check("A"), 0.0, min_interval_s=1200, pin_key=True)
        verdict = auth.admit(self.check("B"), 1199.0, min_interval_s=1200, pin_key=True)
        assert verdict == Verdict(429, "TooManyProviderTokenUpdates", verdict.detail)
        # Stays unusable, even with the old token.
        assert auth.admit(self.check("A"), 5000.0, min_interval_s=1200, pin_key=True).status == 429

    def test_switching_token_after_interval_is_allowed(self):
        auth = ConnectionAuth()
        auth.admit(self.check("A"), 0.0, min_interval_s=1200, pin_key=True)
        assert auth.admit(self.check("B"), 1200.0, min_interval_s=1200, pin_key=True) is None
        assert auth.token == "B" and auth.adoptions == 2

    def test_refused_token_is_never_adopted(self):
        auth = ConnectionAuth()
        expired = TokenCheck("A", "K1", 1, "ExpiredProviderToken")
        assert auth.admit(expired, 0.0, min_interval_s=1200, pin_key=True).status == 403
        assert auth.admit(self.check("B"), 1.0, min_interval_s=1200, pin_key=True) is None

    def test_second_key_id_on_a_connection_is_unrelated(self):
        auth = ConnectionAuth()
        auth.admit(self.check("A", "K1"), 0.0, min_interval_s=0, pin_key=True)
        verdict = auth.admit(self.check("B", "K2"), 5000.0, min_interval_s=0, pin_key=True)
        assert verdict is not None and (verdict.status, verdict.reason) == (403, "UnrelatedKeyIdInToken")
        assert auth.admit(self.check("C", "K2"), 5000.0, min_interval_s=0, pin_key=False) is None


class TestFaultState:
    def test_token_rule_with_count_is_consumed_then_forgotten(self):
        state = FaultState()
        state.apply(FaultScript.model_validate({"tokens": {"ab": {"status": 429, "count": 2}}}), 0.0)
        rules = [state.token_rule("ab") for _ in range(3)]
        assert [(r.status, r.reason) if r else None for r in rules] == [
            (429, "TooManyRequests"),
            (429, "TooManyRequests"),
            None,
        ]

    def test_token_rule_without_count_is_permanent_with_default_reason(self):
        state = FaultState()
        state.apply(FaultScript.model_validate({"tokens": {"ab": {}}}), 0.0)
        assert all(state.token_rule("ab").reason == "Unregistered" for _ in range(5))
        state.apply(FaultScript.model_validate({"clear_tokens": ["ab"]}), 0.0)
        assert state.token_rule("ab") is None

    def test_storm_by_count(self):
        state = FaultState()
        state.apply(FaultScript.model_validate({"storm": {"status": 503, "count": 2}}), 0.0)
        verdicts = [state.storm_verdict(0.0) for _ in range(3)]
        assert [(v.status, v.reason) if v else None for v in verdicts] == [
            (503, "ServiceUnavailable"),
            (503, "ServiceUnavailable"),
            None,
        ]

    def test_storm_by_duration(self):
        state = FaultState()
        state.apply(FaultScript.model_validate({"storm": {"duration_s": 5}}), 100.0)
        assert state.storm_verdict(104.9).status == 500
        assert state.storm_verdict(105.0) is None

    def test_delay_and_refusals_count_down(self):
        state = FaultState()
        state.apply(FaultScript.model_validate({"delay": {"seconds": 2, "count": 1}, "refuse_streams": 2}), 0)
        assert [state.take_delay(), state.take_delay()] == [2, 0]
        assert [state.take_refusal() for _ in range(3)] == [True, True, False]

    @pytest.mark.parametrize(
        ("script", "field"),
        [
            ({"storm": {"status": 404}}, "storm.status"),
            ({"refuse_streams": -1}, "refuse_streams"),
            ({"tokens": {"ab": {"status": 200}}}, "tokens.ab.status"),
            ({"goaway": {"after": "x"}}, "goaway.after"),
            ({"banana": 1}, "banana"),
        ],
    )
    def test_bad_script_names_the_field(self, script, field):
        from daemon.apns.server import ApnsTestServer

        server = ApnsTestServer(team_id=TEAM, keys={}, topics=["com.example.app"])
        with pytest.raises(ValueError, match=field.replace(".", r"\.")):
            server.script(**script)


class TestResponseEncoder:
    def test_blocks_decode_with_a_standard_hpack_decoder_and_leave_its_table_empty(self):
        import hpack

        from daemon.apns.server import ResponseEncoder

        encoder, decoder = ResponseEncoder(), hpack.Decoder()
        answers = [
            [
                (b":status", b"200"),
                (b"apns-id", b"6f1c5f43-0d3e-4c77-a1a8-000000000001"),
                (b"apns-unique-id", b"6f1c5f43-0d3e-4c77-a1a8-000000000002"),
            ],
            [(b":status", b"410"), (b"content-type", b"application/json"), (b"apns-id", b"x" * 200)],
            [(b":status", b"429"), (b"content-type", b"application/json")],
            [(b":status", b"400"), (b"x-long-name-" + b"n" * 20, b"v")],
        ]
        for headers in answers * 2:
            assert decoder.decode(encoder.encode(headers), raw=True) == headers
        assert len(decoder.header_table.dynamic_entries) == 0

    def test_table_size_change_is_signalled_in_the_next_block(self):
        import hpack

        from daemon.apns.server import ResponseEncoder

        encoder, decoder = ResponseEncoder(), hpack.Decoder()
        encoder.header_table_size = 0
        decoder.max_allowed_table_size = 0
        headers = [(b":status", b"200"), (b"apns-id", b"abc")]
        block = encoder.encode(headers)
        assert block[0] & 0xE0 == 0x20  # dynamic table size update first (RFC 7541 §6.3)
        assert decoder.decode(block, raw=True) == headers
        assert decoder.decode(encoder.encode(headers), raw=True) == headers


def test_generated_apns_ids_are_unique_canonical_uuids():
    import re

    from daemon.apns.server import ApnsIds

    ids = ApnsIds()
    values = [ids.next() for _ in range(1000)]
    assert len(set(values)) == 1000
    assert all(
        re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-a[0-9a-f]{3}-[0-9a-f]{12}", v) for v in values
    )


def test_storm_scripted_before_trio_runs_lasts_its_duration():
    from daemon.apns.server import ApnsTestServer

    server = ApnsTestServer(team_id=TEAM, keys={}, topics=["com.example.app"])
    server.script(storm={"status": 503, "duration_s": 60})  # as the CLI's --script does, outside trio
    now = time.monotonic()
    assert server.faults.storm_verdict(now).status == 503
    assert server.faults.storm_verdict(now + 61) is None
