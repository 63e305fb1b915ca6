"""The event loop's histogram exports what prometheus_client's own Histogram exports for the same values."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from daemon.metrics import EventLoopHistogram

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def exposition(registry: CollectorRegistry) -> list[str]:
    # prometheus_client's Histogram adds a _created sample (its creation time): nothing to compare there
    return [line for line in generate_latest(registry).decode().splitlines() if "_created" not in line]


def test_the_same_values_give_the_same_buckets_sum_and_count_as_prometheus_clients_histogram() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("x_seconds", "doc", buckets=BUCKETS, registry=theirs)
    histogram = EventLoopHistogram("x_seconds", "doc", buckets=BUCKETS, registry=ours)
    rng = random.Random(7)
    # the bounds themselves (a value equal to a bound counts in its bucket), 0, above every bound, and a spread
    values = [*BUCKETS, 0.0, 31.0, 1e9, *(rng.expovariate(10) for _ in range(2000))]
    for value in values:
        reference.observe(value)
        histogram.observe(value)
    assert exposition(ours) == exposition(theirs)
    assert f"x_seconds_count {float(len(values))}" in exposition(ours)


def test_an_unobserved_histogram_exports_empty_buckets() -> None:
    registry = CollectorRegistry()
    EventLoopHistogram("y_seconds", "doc", buckets=(0.1, 1.0), registry=registry)
    lines = exposition(registry)
    assert 'y_seconds_bucket{le="0.1"} 0.0' in lines and 'y_seconds_bucket{le="+Inf"} 0.0' in lines
    assert "# TYPE y_seconds histogram" in lines
