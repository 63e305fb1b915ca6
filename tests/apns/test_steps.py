"""What happens after an APNs answer or a silence (``daemon.apns.rules``): the one decision the sender, channel
management and the fan-out apply. The sender's and channel management's tests show them applying it on the
project's APNs server; these pin the table itself."""

from __future__ import annotations

import random

import pytest

from daemon.apns.rules import (
    MAX_REQUEUES,
    NO_CONNECTION,
    Action,
    Again,
    Resend,
    Step,
    Verdict,
    after_answer,
    after_silence,
    classify,
    resend,
    resend_delay,
    retry_delay,
)
from daemon.apns.types import Push, PushResult


def answer(status: int, reason: str | None, *, retries: int = 0, fresh: bool = False, most: int = 3) -> Step:
    return after_answer(classify(status, reason), retries=retries, max_retries=most, fresh_token_used=fresh)


@pytest.mark.parametrize(
    ("status", "reason", "outcome"),
    [
        (200, None, "accepted"),
        (201, None, "accepted"),  # channel created
        (410, "Unregistered", "rejected"),
        (400, "BadDeviceToken", "rejected"),
        (400, "ChannelNotRegistered", "rejected"),
        (400, "CannotCreateChannelConfig", "rejected"),
        (403, "InvalidProviderToken", "failed"),
        (413, "PayloadTooLarge", "failed"),
        (400, "BadCollapseId", "failed"),
    ],
)
def test_final_answers_settle_at_once(status: int, reason: str | None, outcome: str) -> None:
    step = answer(status, reason)
    assert (step.outcome, step.again, step.exhausted) == (outcome, Again.NO, False)


def test_a_transient_error_goes_again_after_a_backoff_until_the_retries_are_spent() -> None:
    step = answer(503, "ServiceUnavailable", retries=2)
    assert (step.outcome, step.again, step.new_connection) == (None, Again.AFTER_BACKOFF, False)
    spent = answer(503, "ServiceUnavailable", retries=3)
    assert (spent.outcome, spent.exhausted, spent.reason) == ("failed", True, "ServiceUnavailable")


def test_an_unusable_connection_is_replaced_whether_or_not_the_push_goes_again() -> None:
    assert answer(429, "TooManyProviderTokenUpdates").new_connection
    spent = answer(503, "Shutdown", retries=3)
    assert spent.outcome == "failed" and spent.new_connection


def test_an_expired_provider_token_goes_again_once_on_a_fresh_token_and_connection() -> None:
    step = answer(403, "ExpiredProviderToken", retries=3)  # the retry budget is not what limits it
    assert (step.again, step.new_provider_token, step.new_connection) == (Again.FRESH_TOKEN, True, True)
    again = answer(403, "ExpiredProviderToken", fresh=True)
    assert (again.outcome, again.exhausted) == ("failed", False)


def test_a_request_apns_never_processed_goes_again_free_up_to_the_bound() -> None:
    step = after_silence("refused", False, retries=3, requeues=MAX_REQUEUES - 1, max_retries=3)
    assert (step.again, step.may_have_arrived) == (Again.REQUEUE, False)
    spent = after_silence("refused", False, retries=0, requeues=MAX_REQUEUES, max_retries=3)
    assert (spent.outcome, spent.reason) == ("failed", "Unprocessed")


def test_a_request_that_went_out_unanswered_goes_again_at_once_and_may_have_arrived() -> None:
    step = after_silence("timeout", True, retries=0, requeues=0, max_retries=3)
    assert (step.again, step.may_have_arrived, step.reason) == (Again.AT_ONCE, True, "Timeout")
    spent = after_silence("lost", True, retries=3, requeues=0, max_retries=3)
    assert (spent.outcome, spent.reason, spent.may_have_arrived) == ("failed", "Lost", True)


def test_no_connection_in_time_is_a_transient_error() -> None:
    step = after_answer(NO_CONNECTION, retries=0, max_retries=3, fresh_token_used=False)
    assert step.again is Again.AFTER_BACKOFF and step.verdict == Verdict(Action.RETRY, "NoConnection")


def test_the_retry_delay_doubles_to_its_cap_with_half_of_it_jittered() -> None:
    class Highest(random.Random):
        def random(self) -> float:
            return 1.0

    delays = [retry_delay(n, base_s=0.1, cap_s=0.5, rng=Highest()) for n in (1, 2, 3, 4)]
    assert delays == [0.05, 0.1, 0.2, 0.25]


def _result(outcome: str, status: int | None, attempts: int) -> PushResult:
    push = Push(token="ab", push_type="liveactivity", topic="t", payload=b"{}", priority=10, kind="update")
    return PushResult(push, outcome, status, None, None, attempts, 0.0)


def test_what_a_final_result_means_for_its_producer() -> None:
    assert resend(_result("accepted", 200, 1)) is Resend.SETTLED
    assert resend(_result("rejected", 410, 1)) is Resend.SETTLED
    assert resend(_result("failed", 503, 4)) is Resend.AS_IS  # APNs answered: it did not arrive
    assert resend(_result("failed", None, 0)) is Resend.AS_IS  # never left
    assert resend(_result("failed", None, 2)) is Resend.QUIET  # went out, no answer: it may have arrived


def test_a_producers_resend_rounds_wait_half_a_second_doubling_to_its_cap() -> None:
    assert [resend_delay(n, cap_s=3.0) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]
