"""The circuit breaker in front of SportMonks: a small state machine, no I/O.

Owns only its own state (closed / open / half_open, the failure streak, the cooldown deadline). It does not
sleep, log or call anything: the client asks ``before_call()`` and reports ``record_success()`` /
``record_failure()``; the clock is injected so the transitions are testable with plain numbers.

    closed ──N consecutive failures──▶ open ──cooldown elapsed──▶ half_open
      ▲                                  ▲                           │ one trial call
      └──────────── trial succeeds ──────┼───────────────────────────┤
                                         └────── trial fails ────────┘

What counts as a failure is the caller's choice (the client counts timeouts, transport errors, 429 and 5xx:
answers that say SportMonks is unwell or overloaded; a 404 or a malformed body is an answer, so a success here).
Half-open lets exactly one trial call through; the others are refused until it reports, so a recovering
upstream is probed once, not stampeded. A trial that ends without an outcome (cancelled) gives its slot back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from daemon.sportmonks.errors import BreakerOpen

BreakerState = Literal["closed", "open", "half_open"]

# Gauge value per state, as daemon.metrics documents SPORTMONKS_BREAKER_STATE.
STATE_GAUGE: dict[str, float] = {"closed": 0.0, "half_open": 0.5, "open": 1.0}


class CircuitBreaker:
    def __init__(
        self,
        *,
        failure_threshold: int,
        cooldown_s: float,
        clock: Callable[[], float],
        on_change: Callable[[BreakerState], None] | None = None,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError("failure_threshold must be >= 1")
        if cooldown_s <= 0:
            raise ValueError("cooldown_s must be > 0")
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._on_change = on_change
        self._state: BreakerState = "closed"
        self._failures = 0
        self._opened_at = 0.0
        self._trial_in_flight = False
        self.opened_count = 0  # times it opened, for stats

    @property
    def state(self) -> BreakerState:
        """The state now; an open breaker whose cooldown has elapsed reads as half_open."""
        if self._state == "open" and self._clock() >= self._opened_at + self.cooldown_s:
            self._set("half_open")
        return self._state

    @property
    def consecutive_failures(self) -> int:
        return self._failures

    def retry_in(self) -> float:
        """Seconds until an open breaker lets a trial call through (0 when it would now)."""
        if self.state == "open":
            return max(0.0, self._opened_at + self.cooldown_s - self._clock())
        return 0.0

    def before_call(self) -> bool:
        """Admit a call or raise ``BreakerOpen``. Returns True when the admitted call is the half-open trial."""
        state = self.state
        if state == "closed":
            return False
        if state == "half_open" and not self._trial_in_flight:
            self._trial_in_flight = True
            return True
        # Open, or half-open with the trial already out: the caller may try again after the cooldown
        # (for a busy half-open breaker, that is a conservative upper bound).
        raise BreakerOpen(self.retry_in() if state == "open" else self.cooldown_s)

    def record_success(self) -> None:
        self._failures = 0
        self._trial_in_flight = False
        if self._state != "closed":
            self._set("closed")

    def record_failure(self) -> None:
        self._trial_in_flight = False
        self._failures += 1
        if self._state == "half_open" or (
            self._state == "closed" and self._failures >= self.failure_threshold
        ):
            self._open()
        # Already open (a call admitted before it opened failed late): keep the original cooldown.

    def abandon_trial(self) -> None:
        """The half-open trial ended with no outcome (cancelled): let the next caller make the trial."""
        self._trial_in_flight = False

    def _open(self) -> None:
        self._opened_at = self._clock()
        self.opened_count += 1
        self._set("open")

    def _set(self, state: BreakerState) -> None:
        if state != self._state:
            self._state = state
            if self._on_change is not None:
                self._on_change(state)
