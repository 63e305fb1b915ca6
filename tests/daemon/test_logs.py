"""Structured logs: JSON off a terminal, console on one, instance and match ids, tokens shortened."""

from __future__ import annotations

import io
import logging

import structlog
import trio

from daemon import logs
from daemon.config import LoggingSettings
from tests.conftest import log_lines

DEVICE_TOKEN = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"


def test_every_line_is_json_with_the_instance_id_and_the_logger_name(log_stream: io.StringIO) -> None:
    logs.get_logger("actors.feed").info("livescores_fetched", matches=3)
    (line,) = log_lines(log_stream)
    assert line["event"] == "livescores_fetched" and line["matches"] == 3
    assert line["instance_id"] == "test-instance" and line["logger"] == "actors.feed"
    assert line["level"] == "info" and line["timestamp"].endswith("Z")


def test_a_module_level_logger_follows_a_later_configure() -> None:
    early = logs.get_logger("early.module")  # as at import time, before `sightscreen run` configures
    stream = io.StringIO()
    logs.configure("info", json=True, stream=stream, instance_id="late")
    try:
        early.info("hello")
    finally:
        logs.reset()
    assert log_lines(stream)[0]["instance_id"] == "late"


async def test_match_id_bound_in_a_task_reaches_its_children_and_no_sibling(log_stream: io.StringIO) -> None:
    log = logs.get_logger("actors.match")

    async def match_actor(match_id: str) -> None:
        with structlog.contextvars.bound_contextvars(match_id=match_id):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(tick)

    async def tick() -> None:
        log.info("tick")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(match_actor, "71344")
        nursery.start_soon(match_actor, "71345")
    log.info("orchestrator_cycle")
    lines = log_lines(log_stream)
    assert sorted(line.get("match_id") for line in lines if line["event"] == "tick") == ["71344", "71345"]
    assert "match_id" not in next(line for line in lines if line["event"] == "orchestrator_cycle")


def test_device_tokens_are_shortened_and_secret_keys_hidden(log_stream: io.StringIO) -> None:
    log = logs.get_logger("actors.sender")
    log.info("push_rejected", device_token=DEVICE_TOKEN, reason="BadDeviceToken")
    log.info(
        "push_sent",
        token=logs.short_token(DEVICE_TOKEN),
        update_token=DEVICE_TOKEN,
        authorization="bearer eyJhbGciOiJFUzI1NiJ9.x.y",
        tokens=12,
    )
    first, second = log_lines(log_stream)
    assert first["device_token"] == "a1b2c3…8f90"
    assert second["token"] == "a1b2c3…8f90" and second["update_token"] == "a1b2c3…8f90"
    assert second["authorization"] == "[redacted]" and second["tokens"] == 12
    assert DEVICE_TOKEN not in log_stream.getvalue()


def test_registered_secrets_are_scrubbed_wherever_they_appear(log_stream: io.StringIO) -> None:
    provider_token = "eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQyJ9.payload.signature"
    logs.register_secret(provider_token)
    logs.get_logger("x").info("sent", headers={"x-auth": f"bearer {provider_token}"}, note=[provider_token])
    assert provider_token not in log_stream.getvalue()
    assert log_lines(log_stream)[0]["headers"] == {"x-auth": "bearer [redacted]"}


def test_stdlib_loggers_join_the_same_output_at_warning(log_stream: io.StringIO) -> None:
    logs.reset()
    logs.configure("debug", json=True, stream=log_stream, instance_id="i-1")  # stdlib_level: warning
    logging.getLogger("botocore.retryhandler").info("retry 1")  # below the stdlib level: dropped
    logging.getLogger("botocore.retryhandler").warning("throttled %s", "PutItem")
    (line,) = log_lines(log_stream)
    assert line == {
        **line,
        "event": "throttled PutItem",
        "logger": "botocore.retryhandler",
        "level": "warning",
        "instance_id": "i-1",
    }


def test_level_filters_the_daemon_loggers(log_stream: io.StringIO) -> None:
    logs.reset()
    logs.configure("warning", json=True, stream=log_stream)
    logs.get_logger("x").info("quiet")
    logs.get_logger("x").warning("loud")
    assert [line["event"] for line in log_lines(log_stream)] == ["loud"]


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_auto_format_is_readable_on_a_terminal_and_json_elsewhere() -> None:
    terminal, pipe = FakeTerminal(), io.StringIO()
    try:
        logs.configure("info", stream=terminal, instance_id="i-1")
        logs.get_logger("x").info("on_terminal", match_id="71344")
        logs.configure("info", stream=pipe, instance_id="i-1")
        logs.get_logger("x").info("on_pipe")
    finally:
        logs.reset()
    assert "on_terminal" in terminal.getvalue() and "match_id" in terminal.getvalue()
    assert not terminal.getvalue().lstrip().startswith("{")
    assert log_lines(pipe)[0]["event"] == "on_pipe"


def test_configure_from_logging_settings_honours_format_and_level() -> None:
    terminal = FakeTerminal()
    try:
        logs.configure_from(LoggingSettings(format="json", level="error"), stream=terminal, instance_id="i-2")
        logs.get_logger("x").warning("dropped")
        logs.get_logger("x").error("kept")
    finally:
        logs.reset()
    (line,) = log_lines(terminal)  # JSON although the stream is a terminal: the format was asked for
    assert (line["event"], line["instance_id"]) == ("kept", "i-2")
