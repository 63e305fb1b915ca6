"""What ``check-config`` checks beyond the models: the engine's credentials and the files they come from
(the APNs key, Apple's ids, the topic, the CA bundle, the SportMonks address and token), without the network.

A file the models accept can still fail at start-up: an empty file has no APNs key, a key file may not be a
PEM P-256 key, a CA bundle may not be certificates. ``credential_problems`` finds those (each as a ``ConfigProblem``
naming the key, and the file's path where there is one); ``check-config`` then builds the daemon exactly as
``run`` does (``daemon.commands.check_config``), so that OK from ``check-config`` means ``run`` starts. What it cannot know without the network (credentials accepted by AWS,
APNs or SportMonks) is left to ``run``.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from urllib.parse import urlsplit

from daemon.apns.settings import ApnsSettings
from daemon.apns.token import load_signing_key
from daemon.config.loading import ConfigProblem, read_secret_file
from daemon.config.models import Config
from daemon.sportmonks.settings import SportMonksSettings

_APPLE_ID_RE = re.compile(r"[A-Z0-9]{10}")
PRODUCTION_SPORTMONKS = "https://cricket.sportmonks.com"


def credential_problems(config: Config, env: Mapping[str, str] = os.environ) -> list[ConfigProblem]:
    """Every problem that would stop ``run`` from starting; empty when it would start."""
    problems: list[ConfigProblem] = []
    if config.runs("engine"):
        problems += _apns(config.apns)
        problems += _sportmonks(config.sportmonks, env)
    return problems


def _apns(apns: ApnsSettings) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    where = "apns.private_key_file" if apns.private_key_file else "apns.private_key"
    if apns.private_key is None:
        problems.append(
            ConfigProblem(
                "apns.private_key_file",
                "required: the .p8 signing key APNs tokens are "
                "signed with (or apns.private_key, or $SIGHTSCREEN_APNS__PRIVATE_KEY)",
            )
        )
    else:
        try:
            load_signing_key(apns.private_key.get_secret_value())
        except ValueError as exc:
            reason = str(exc).removeprefix("apns private_key: ")
            shown = f"{apns.private_key_file}: " if apns.private_key_file else ""
            problems.append(ConfigProblem(where, f"{shown}{reason}"))
    for key, value in (("team_id", apns.team_id), ("key_id", apns.key_id)):
        if not _APPLE_ID_RE.fullmatch(value):
            problems.append(
                ConfigProblem(f"apns.{key}", f"required: Apple's 10-character id (got {value!r})")
            )
    if not apns.topic:
        problems.append(ConfigProblem("apns.topic", "required: the app's bundle id"))
    parts = urlsplit(apns.url)
    if parts.scheme != "https" or not parts.hostname:
        problems.append(ConfigProblem("apns.url", f"expected https://HOST[:PORT], got {apns.url!r}"))
    if apns.ca_file:
        try:
            read_secret_file(apns.ca_file)  # a regular, small, readable file (a FIFO would hang ssl)
            ssl.create_default_context(cafile=apns.ca_file)
        except ValueError as exc:
            problems.append(ConfigProblem("apns.ca_file", str(exc)))
        except (ssl.SSLError, OSError) as exc:
            problems.append(ConfigProblem("apns.ca_file", f"{apns.ca_file}: not a PEM CA bundle ({exc})"))
    return problems


def _sportmonks(sm: SportMonksSettings, env: Mapping[str, str]) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    parts = urlsplit(sm.base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        problems.append(
            ConfigProblem("sportmonks.base_url", f"expected http(s)://HOST/..., got {sm.base_url!r}")
        )
    elif (
        sm.base_url.startswith(PRODUCTION_SPORTMONKS)
        and sm.api_token is None
        and not env.get(sm.api_token_env)
    ):
        problems.append(
            ConfigProblem(
                "sportmonks.api_token_file",
                f"required for {PRODUCTION_SPORTMONKS}: the API token (or api_token, or ${sm.api_token_env})",
            )
        )
    return problems
