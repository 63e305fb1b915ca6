"""Configuration: the example and demo files, environment overrides, secrets, and check-config's verdicts."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from daemon import logs
from daemon.commands.check_config import main as check_main
from daemon.config import Config, ConfigError, load_config, render_example
from tests.conftest import log_lines

PROJECT = Path(__file__).resolve().parents[2]
EXAMPLE = PROJECT / "config" / "sightscreen.example.toml"
DEMO = PROJECT / "config" / "demo.toml"
# Long enough to be scrubbed from logs by value, and distinctive enough to find anywhere it leaks.
TOKEN = "smk-Tq93nX2pL7vR4wZ8yB1cD6eF"
PEM = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgSeCrEtSeCrEt\n-----END PRIVATE KEY-----"
# A real P-256 key, for files check-config must accept (PEM above only looks like one).
REAL_PEM = (
    ec.generate_private_key(ec.SECP256R1())
    .private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    .decode()
)
APNS_IDS = '[apns]\nteam_id = "TEAM123456"\nkey_id = "KEY1234567"\ntopic = "com.example.app"\n'


def complete(folder: Path, extra: str = "", name: str = "sightscreen.toml") -> Path:
    """A file ``run`` starts with: an APNs key file, Apple ids, a topic and a SportMonks token file."""
    (folder / "apns.p8").write_text(REAL_PEM)
    (folder / "token").write_text(TOKEN)
    return write(
        folder,
        extra + APNS_IDS + 'private_key_file = "apns.p8"\n[sportmonks]\napi_token_file = "token"\n',
        name,
    )


def write(folder: Path, text: str, name: str = "sightscreen.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def problems_of(path: Path | None, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(path, env or {})
    return [str(p) for p in caught.value.problems]


# --- the shipped files ---------------------------------------------------------------------------------


def test_example_config_is_generated_from_the_settings_classes() -> None:
    assert EXAMPLE.read_text() == render_example(), (
        "config/sightscreen.example.toml is out of date: run "
        "`sightscreen check-config --example > config/sightscreen.example.toml`"
    )


def test_example_config_loads_and_holds_exactly_the_defaults() -> None:
    config = load_config(EXAMPLE, {})
    defaults = Config()
    assert config.model_dump(exclude={"instance": {"id"}}) == defaults.model_dump(
        exclude={"instance": {"id"}}
    )


def test_example_config_documents_every_key_with_its_default() -> None:
    text = EXAMPLE.read_text()

    def walk(model: type, dotted: str) -> None:
        assert f"[{dotted}]" in text
        for name, field in model.model_fields.items():  # type: ignore[attr-defined]
            sub = getattr(field.annotation, "model_fields", None)
            if sub is not None:
                walk(field.annotation, f"{dotted}.{name}")
            else:
                assert f"\n{name} = " in text or f"\n# {name} = " in text, (
                    f"{dotted}.{name} is not documented"
                )

    for section, field in Config.model_fields.items():
        walk(field.annotation, section)  # type: ignore[arg-type]


def test_demo_config_loads() -> None:
    config = load_config(DEMO, {})
    assert config.instance.id == "demo-1"
    assert config.dynamodb.endpoint_url == "http://127.0.0.1:4566"
    # relative paths are taken beside the file, whatever the working directory
    assert config.admin.socket_path == str(DEMO.parent / "run" / "admin.sock")


def test_no_file_means_every_default() -> None:
    config = load_config(None, {})
    assert config.admin.socket_path == "/run/sightscreen/admin.sock"
    assert config.admin.mode == 0o660
    assert config.logging.format == "auto"
    assert config.instance.id  # <hostname>-<pid>


# --- a good file and the environment -------------------------------------------------------------------


def test_file_values_are_taken(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[instance]
id = "eu-1"
shutdown_grace_s = 12.5
[admin]
mode = 0o600
max_clients = 8
[logging]
level = "DEBUG"
format = "json"
[feed]
marquee_leagues = [3, 5]
""",
    )
    config = load_config(path, {})
    assert config.instance.id == "eu-1"
    assert config.instance.shutdown_grace_s == 12.5
    assert (config.admin.mode, config.admin.max_clients) == (0o600, 8)
    assert (config.logging.level, config.logging.format) == ("debug", "json")
    assert config.feed.marquee_leagues == [3, 5]


def test_environment_overrides_the_file_with_typed_values(tmp_path: Path) -> None:
    path = write(tmp_path, '[instance]\nid = "from-file"\n[admin]\nmax_clients = 8\n')
    env = {
        "SIGHTSCREEN_INSTANCE__ID": "from-env",
        "SIGHTSCREEN_ADMIN__MAX_CLIENTS": "16",
        "SIGHTSCREEN_ADMIN__MODE": "0640",
        "SIGHTSCREEN_FEED__MARQUEE_LEAGUES": "[1, 2]",
        "SIGHTSCREEN_DYNAMODB__TABLE_PREFIX": "123",  # a text key keeps digits as text
        "SIGHTSCREEN_JOBS__PREMATCH__ENABLED": "false",  # nested tables too
        "SIGHTSCREEN_ADMIN_SOCKET": "/elsewhere.sock",  # ctl's variable, not an override
        "UNRELATED": "x",
    }
    config = load_config(path, env)
    assert config.instance.id == "from-env"
    assert config.admin.max_clients == 16
    assert config.admin.mode == 0o640
    assert config.feed.marquee_leagues == [1, 2]
    assert config.dynamodb.table_prefix == "123"
    assert config.jobs.prematch.enabled is False


def test_a_wrong_environment_value_is_blamed_on_its_variable(tmp_path: Path) -> None:
    found = problems_of(
        None,
        {
            "SIGHTSCREEN_ADMIN__MAX_CLIENTS": "lots",
            "SIGHTSCREEN_ADMN__MODE": "0660",
            "SIGHTSCREEN_ADMIN__SOCKT_PATH": "/x",
        },
    )
    assert (
        "environment SIGHTSCREEN_ADMIN__SOCKT_PATH: unknown key admin.sockt_path (did you mean 'socket_path'?)"
        in found
    )
    assert "environment SIGHTSCREEN_ADMN__MODE: unknown key admn (did you mean 'admin'?)" in found
    assert any(
        p.startswith("admin.max_clients (from SIGHTSCREEN_ADMIN__MAX_CLIENTS): wrong type") for p in found
    )


# --- check-config on bad files -------------------------------------------------------------------------


def test_every_wrong_key_is_named_with_its_dotted_path_and_why(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[apns]
topik = "app.sightscreen"
connections = 0
[admin]
max_clients = "many"
mode = "rw-rw----"
[logging]
format = "xml"
[dynamodbb]
region = "eu-west-1"
[orchestrator]
lease_s = 3.0
renew_fraction = 0.5
clock_skew_bound_s = 2.0
""",
    )
    found = problems_of(path)
    assert "apns.topik: unknown key (did you mean 'topic'?)" in found
    assert "apns.connections: out of range: input should be greater than or equal to 1 (got 0)" in found
    assert (
        "admin.max_clients: wrong type: input should be a valid integer, unable to parse string as an integer (got 'many')"
        in found
    )
    assert any(p.startswith("admin.mode: must be an octal file mode") for p in found)
    assert "logging.format: Input should be 'auto', 'json' or 'console' (got 'xml')" in found
    assert "dynamodbb: unknown key (did you mean 'dynamodb'?)" in found
    # a section-level error names the section, and does not echo the section's values (secrets could be in it)
    assert "orchestrator: clock_skew_bound_s + lease_s * renew_fraction must be below lease_s" in found
    assert len(found) == 7


def test_a_bad_instance_id_is_refused(tmp_path: Path) -> None:
    found = problems_of(write(tmp_path, '[instance]\nid = "has space"\n'))
    assert found[0].startswith("instance.id: must be 1-128 characters")


def test_check_config_exits_2_and_lists_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "[apns]\ntopik = 1\nconnections = 99\n")
    assert check_main([str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"{path}: 2 problem(s)",
        "  apns.connections: out of range: input should be less than or equal to 32 (got 99)",
        "  apns.topik: unknown key (did you mean 'topic'?)",
    ]


def test_check_config_exits_0_with_one_line_on_a_good_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = complete(tmp_path, '[instance]\nid = "ok-1"\n')
    assert check_main([str(path)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"OK: {path} is valid (instance ok-1")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("[apns\nurl = 1\n", "not valid TOML"), (b"\xff\xfe[x]", "not valid UTF-8")],
)
def test_a_file_that_is_not_toml_is_reported_not_raised(
    tmp_path: Path, text: str | bytes, expected: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    found = problems_of(path)
    assert len(found) == 1 and expected in found[0]


def test_a_missing_file_is_reported(tmp_path: Path) -> None:
    assert problems_of(tmp_path / "absent.toml") == [f"{tmp_path / 'absent.toml'}: file not found"]


def test_check_config_is_wired_into_the_cli(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "daemon", "check-config", str(complete(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=PROJECT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("OK: ")


# --- secrets -------------------------------------------------------------------------------------------


def test_secret_files_are_read_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "token").write_text(TOKEN + "\n")
    (tmp_path / "secrets" / "apns.p8").write_text(PEM + "\n")
    path = write(
        tmp_path,
        '[sportmonks]\napi_token_file = "secrets/token"\n[apns]\nprivate_key_file = "secrets/apns.p8"\n',
    )
    config = load_config(path, {})
    assert config.sportmonks.api_token is not None and config.sportmonks.api_token.get_secret_value() == TOKEN
    assert config.apns.private_key is not None and config.apns.private_key.get_secret_value() == PEM
    assert config.apns.private_key_file == str(tmp_path / "secrets" / "apns.p8")


def test_secret_files_can_come_from_systemd_credentials(tmp_path: Path) -> None:
    (tmp_path / "apns.p8").write_text(PEM)
    env = {
        "CREDENTIALS_DIRECTORY": str(tmp_path),
        "SIGHTSCREEN_APNS__PRIVATE_KEY_FILE": "$CREDENTIALS_DIRECTORY/apns.p8",
    }
    config = load_config(None, env)
    assert config.apns.private_key is not None and config.apns.private_key.get_secret_value() == PEM
    found = problems_of(None, {"SIGHTSCREEN_APNS__PRIVATE_KEY_FILE": "${CREDENTIALS_DIRECTORY}/apns.p8"})
    assert found == ["apns.private_key_file: environment variable CREDENTIALS_DIRECTORY is not set"]


def test_secrets_from_the_environment_are_taken_verbatim() -> None:
    config = load_config(
        None, {"SIGHTSCREEN_SPORTMONKS__API_TOKEN": "12345678", "SIGHTSCREEN_APNS__PRIVATE_KEY": PEM}
    )
    assert (
        config.sportmonks.api_token is not None
        and config.sportmonks.api_token.get_secret_value() == "12345678"
    )
    assert config.apns.private_key is not None and config.apns.private_key.get_secret_value() == PEM


def test_unreadable_empty_or_doubled_secrets_are_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    found = problems_of(
        write(tmp_path, '[sportmonks]\napi_token_file = "missing"\n[apns]\nprivate_key_file = "empty"\n')
    )
    assert found == [
        f"apns.private_key_file: {tmp_path / 'empty'} is empty",
        f"sportmonks.api_token_file: cannot read {tmp_path / 'missing'}: No such file or directory",
    ]
    (tmp_path / "token").write_text(TOKEN)
    found = problems_of(write(tmp_path, f'[sportmonks]\napi_token = "{TOKEN}"\napi_token_file = "token"\n'))
    assert found == [
        "sportmonks.api_token_file: both api_token and api_token_file are set; keep one (the file is preferred)"
    ]
    assert TOKEN not in "".join(found)


def test_a_secret_never_appears_in_check_config_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text(TOKEN)
    good = write(tmp_path, APNS_IDS + '[sportmonks]\napi_token_file = "token"\n', "good.toml")
    monkeypatch.setenv("SIGHTSCREEN_APNS__PRIVATE_KEY", REAL_PEM)
    assert check_main([str(good), "--show"]) == 0
    out = capsys.readouterr().out
    shown = json.loads(out.split("\n", 1)[1])
    assert shown["sportmonks"]["api_token"] == "**********"
    assert shown["apns"]["private_key"] == "**********"
    # A wrong value for a secret key is refused without being echoed back.
    monkeypatch.delenv("SIGHTSCREEN_APNS__PRIVATE_KEY")
    bad = write(
        tmp_path, f'[sportmonks]\napi_token = ["{TOKEN}"]\n[apns]\nprivate_key = 123456789\n', "bad.toml"
    )
    assert check_main([str(bad)]) == 2
    captured = capsys.readouterr()
    assert (
        "sportmonks.api_token: wrong type" in captured.err and "apns.private_key: wrong type" in captured.err
    )
    for text in (out, captured.out, captured.err):
        assert TOKEN not in text and "MIGHAgEAMBMG" not in text and "123456789" not in captured.err
        assert REAL_PEM.splitlines()[1] not in text


def test_a_loaded_secret_never_reaches_the_logs(tmp_path: Path, log_stream: io.StringIO) -> None:
    import logging

    (tmp_path / "token").write_text(TOKEN)
    config = load_config(
        write(tmp_path, '[sportmonks]\napi_token_file = "token"\n'), {"SIGHTSCREEN_APNS__PRIVATE_KEY": PEM}
    )
    log = logs.get_logger("test.secrets")
    # Everything a careless caller might do: the whole config, the settings object, the raw value.
    log.info("config_loaded", config=config.model_dump(), sportmonks=config.sportmonks)
    log.warning(f"calling with token {TOKEN}", url=f"https://x/api?api_token={TOKEN}")
    log.error("apns key", key=config.apns.private_key.get_secret_value() if config.apns.private_key else "")
    try:
        raise RuntimeError(f"boom {TOKEN}")
    except RuntimeError:
        log.exception("failed")
    logging.getLogger("httpx").warning("GET https://x/?api_token=%s", TOKEN)
    text = log_stream.getvalue()
    lines = log_lines(log_stream)
    assert len(lines) == 5
    assert TOKEN not in text
    for body_line in PEM.splitlines()[1:-1]:
        assert body_line not in text
    assert "[redacted]" in lines[1]["event"] and lines[4]["logger"] == "httpx"


def test_a_config_built_in_code_can_register_its_secrets(log_stream: io.StringIO) -> None:
    from daemon.config import register_secrets

    secret = "demo-only-token-0123456789"
    config = Config.model_validate({"sportmonks": {"api_token": secret}})
    register_secrets(config)
    logs.get_logger("demo").info(f"token is {secret}")
    assert secret not in log_stream.getvalue()
    assert log_lines(log_stream)[0]["event"] == "token is [redacted]"


def test_the_fanout_leases_must_fit_the_orchestrators(tmp_path: Path) -> None:
    """A shard's lease must outlast its renewal and the clock skew; a live owner's match lease must last a
    shard renewal beyond its own renewal period and the skew (helpers hand an alerting chunk only then)."""
    short_shard = problems_of(write(tmp_path, "[fanout]\nshard_lease_s = 2.0\nshard_renew_every_s = 1.5\n"))
    assert any("fanout.shard_lease_s must exceed fanout.shard_renew_every_s" in p for p in short_shard)
    tight = "[orchestrator]\nlease_s = 6.0\nrenew_fraction = 0.5\n[fanout]\nshard_renew_every_s = 2.0\n"
    found = problems_of(write(tmp_path, tight))
    assert any("orchestrator.lease_s must exceed fanout.shard_renew_every_s" in p for p in found), found
    roomy = "[orchestrator]\nlease_s = 7.0\nrenew_fraction = 0.5\n[fanout]\nshard_renew_every_s = 2.0\n"
    assert load_config(write(tmp_path, roomy), {}).fanout.shard_renew_every_s == 2.0
