"""Fixtures of the actors' tests. The sender's tests run against the project's APNs server, so they share the
APNs server fixtures of ``tests/apns``."""

from tests.apns.conftest import apns_engine, signing_key, start_apns_server, team_id

__all__ = ["apns_engine", "signing_key", "start_apns_server", "team_id"]
