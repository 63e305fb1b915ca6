"""check-config builds what ``run`` builds; every number has a finite bound; secret files are small regular files."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import typing
from pathlib import Path
from typing import Any

import annotated_types as at
import pytest
from pydantic import BaseModel, ValidationError

from daemon.commands.check_config import main as check_main
from daemon.config import Config, ConfigError, load_config
from daemon.config.introspect import submodel, unwrap_optional

from .test_config import PROJECT, complete, write


def float_fields(model: type[BaseModel], path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every setting typed float (alone, optional, or as a dict's values), with its dotted path."""
    found: list[tuple[tuple[str, ...], Any]] = []
    for name, field in model.model_fields.items():
        sub = submodel(field.annotation)
        if sub is not None:
            found += float_fields(sub, (*path, name))
            continue
        members = unwrap_optional(field.annotation)
        if float in members:
            found.append(((*path, name), field))
        for member in members:
            if typing.get_origin(member) is dict and float in map(_base, typing.get_args(member)[1:]):
                found.append(((*path, name), field))
    return found


def _base(annotation: Any) -> Any:
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation


def nest(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    data: Any = value
    for part in reversed(path):
        data = {part: data}
    return data


# A key each dict-of-float setting accepts, to put a bad value under.
DICT_KEYS = {("engine", "cooldowns_s"): "four", ("jobs", "prematch", "window_s_by_league"): "T20I"}


def test_every_float_setting_refuses_inf_nan_and_absurd_values() -> None:
    fields = float_fields(Config)
    assert len(fields) > 50  # the walk found the settings
    for path, _field in fields:
        for bad in (math.inf, -math.inf, math.nan, 1e300, -1e300):
            value: Any = {DICT_KEYS[path]: bad} if path in DICT_KEYS else bad
            with pytest.raises(ValidationError):
                Config.model_validate(nest(path, value))


def test_every_scalar_float_setting_declares_both_bounds() -> None:
    for path, field in float_fields(Config):
        if path in DICT_KEYS:
            continue
        lower = any(isinstance(m, at.Ge | at.Gt) for m in field.metadata)
        upper = any(isinstance(m, at.Le | at.Lt) for m in field.metadata)
        assert lower and upper, ".".join(path)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("sportmonks", "breaker_cooldown_s"), math.inf),
        (("feed", "livescores_cadence_s"), 1e12),
        (("orchestrator", "lease_s"), 1e9),
    ],
)
def test_the_settings_the_report_named_are_refused(path: tuple[str, ...], value: float) -> None:
    with pytest.raises(ValidationError, match="less than or equal"):
        Config.model_validate(nest(path, value))


def test_the_admin_socket_mode_is_at_most_0660(tmp_path: Path) -> None:
    for ok in ("0660", "0600", "0640"):
        assert load_config(write(tmp_path, f'[admin]\nmode = "{ok}"\n'), {}).admin.mode == int(ok, 8)
    for bad in ("0777", "0666", "0670", "0661", "0760"):
        with pytest.raises(ConfigError, match="admin.mode: must grant at most 0o660"):
            load_config(write(tmp_path, f'[admin]\nmode = "{bad}"\n'), {})


def test_endpoint_budgets_refuse_negative_and_unknown_endpoints(tmp_path: Path) -> None:
    ok = load_config(
        write(tmp_path, "[sportmonks]\nendpoint_budgets = { fixtures = 1500, livescores = 0 }\n"), {}
    )
    assert ok.sportmonks.endpoint_budgets == {"fixtures": 1500, "livescores": 0}
    with pytest.raises(ConfigError, match=r"between 0 and 1000000 calls an hour for \['fixtures'\]"):
        load_config(write(tmp_path, "[sportmonks]\nendpoint_budgets = { fixtures = -5 }\n"), {})
    with pytest.raises(ConfigError, match=r"unknown endpoint\(s\) \['fixturez'\]"):
        load_config(write(tmp_path, "[sportmonks]\nendpoint_budgets = { fixturez = 100 }\n"), {})


# --- secret files ------------------------------------------------------------------------------------------
def _problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(path, {})
    return [str(p) for p in caught.value.problems]


def test_a_fifo_secret_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "token")
    path = write(tmp_path, '[sportmonks]\napi_token_file = "token"\n')
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.extend(_problems(path)), daemon=True)
    reader.start()
    reader.join(10)  # a blocking open would wait forever for a writer
    assert not reader.is_alive(), "reading the FIFO blocked"
    assert found == [f"sportmonks.api_token_file: {tmp_path / 'token'} is not a regular file (it is a FIFO)"]


def test_a_device_or_a_huge_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = write(tmp_path, '[sportmonks]\napi_token_file = "/dev/zero"\n')
    assert _problems(path) == [
        "sportmonks.api_token_file: /dev/zero is not a regular file (it is a character device)"
    ]
    with open(tmp_path / "big", "wb") as handle:
        handle.truncate(10 * 1024 * 1024)  # sparse: 10 MB that take no disk
    path = write(tmp_path, '[apns]\nprivate_key_file = "big"\n')
    (found,) = _problems(path)
    assert found.startswith(
        f"apns.private_key_file: {tmp_path / 'big'} is 10485760 bytes; a secret file holds at most"
    )


def test_a_directory_secret_is_refused(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    path = write(tmp_path, '[sportmonks]\napi_token_file = "dir"\n')
    assert _problems(path) == [
        f"sportmonks.api_token_file: {tmp_path / 'dir'} is not a regular file (it is a directory)"
    ]


# --- check-config builds what run builds --------------------------------------------------------------------
def test_check_config_on_an_empty_file_says_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "")
    assert check_main([str(path)]) == 2
    err = capsys.readouterr().err
    for key in (
        "apns.private_key_file: required",
        "apns.team_id: required",
        "apns.key_id: required",
        "apns.topic: required",
        "sportmonks.api_token_file: required",
    ):
        assert key in err, err


def test_check_config_refuses_a_key_that_is_not_pem_naming_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = complete(tmp_path)
    (tmp_path / "apns.p8").write_text("this is not a key\n")
    assert check_main([str(path)]) == 2
    err = capsys.readouterr().err
    assert f"apns.private_key_file: {tmp_path / 'apns.p8'}: not a PEM-encoded private key" in err


def test_check_config_refuses_a_key_on_another_curve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    path = complete(tmp_path)
    other = ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (tmp_path / "apns.p8").write_bytes(other)
    assert check_main([str(path)]) == 2
    assert "P-256" in capsys.readouterr().err


def test_check_config_refuses_a_ca_file_that_is_not_certificates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    path = complete(tmp_path, name="base.toml")
    text = path.read_text().replace("[apns]\n", '[apns]\nca_file = "ca.pem"\n')
    assert check_main([str(write(tmp_path, text))]) == 2
    assert f"apns.ca_file: {tmp_path / 'ca.pem'}: not a PEM CA bundle" in capsys.readouterr().err


def test_run_refuses_a_key_check_config_refuses_with_a_clear_error_and_no_traceback(tmp_path: Path) -> None:
    bad = complete(tmp_path)
    (tmp_path / "apns.p8").write_text("junk")
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    result = subprocess.run(
        [sys.executable, "-m", "daemon", "run", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=PROJECT,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "cannot start with" in result.stderr and "not a PEM-encoded private key" in result.stderr


def test_an_api_only_instance_needs_no_apns_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(
        tmp_path,
        '[instance]\nroles = ["api"]\n[api]\nlisten = "127.0.0.1:0"\n'
        '[auth]\nuser_pool_id = "us-east-1_abcdef"\nclient_ids = ["app"]\n',
    )
    code = check_main([str(path)])
    assert code == 0, capsys.readouterr().err
