"""The annotated example configuration (``config/sightscreen.example.toml``), generated from the models.

Every key with its type, bounds, default and description; the values written are the defaults, so the
file loads as-is. ``sightscreen check-config --example`` prints it and a test keeps the checked-in file equal
to it.
"""

from __future__ import annotations

import json
import textwrap
import typing
from typing import Any, Literal

from pydantic import BaseModel, SecretStr

from daemon.config.introspect import submodel, unwrap_optional
from daemon.config.models import AdminSettings, Config, InstanceSettings

_EXAMPLE_HEADER = """\
# Sightscreen daemon configuration: every key, its default, and why.
#
# Generated from the settings classes by `sightscreen check-config --example`; regenerate it when a
# component adds a key (a test fails until the file matches). The values below ARE the defaults, so this
# file loads as-is; a commented-out key is unset by default.
#
# Environment overrides: SIGHTSCREEN_<SECTION>__<KEY>=value (double underscore between section and key)
# wins over this file, e.g. SIGHTSCREEN_ADMIN__SOCKET_PATH=/tmp/admin.sock or
# SIGHTSCREEN_FEED__MARQUEE_LEAGUES="[3, 5]". Values are read as TOML scalars or arrays; keys that take
# text (and secrets) take the value verbatim.
#
# Secrets (the APNs key, the SportMonks token) are never written here in production: point the
# *_file key at a file (for systemd's LoadCredential=: "$CREDENTIALS_DIRECTORY/apns.p8"), or set
# SIGHTSCREEN_APNS__PRIVATE_KEY / SIGHTSCREEN_SPORTMONKS__API_TOKEN. Secrets are never logged nor printed by
# check-config.
#
# Paths (keys ending in _file or _path) may use $VARS from the environment; a relative path is relative to
# the folder of the configuration file, not to the daemon's working directory.
#
# Check a file with: sightscreen check-config FILE   (exit 0: OK; exit 2: each wrong key and why)
"""


def _toml_value(value: Any) -> str:
    if isinstance(value, SecretStr):
        return '"..."'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _type_name(annotation: Any) -> str:
    """A reader's name for a field's type: string, number, "a" | "b", secret, list[int]..."""
    names = []
    for member in unwrap_optional(annotation):
        if typing.get_origin(member) is Literal:
            names.append(" | ".join(json.dumps(a) for a in typing.get_args(member)))
        elif member is SecretStr:
            names.append("secret")
        elif isinstance(member, type):
            plain = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}
            names.append(plain.get(member.__name__, member.__name__))
        else:
            names.append(str(member).replace("typing.", ""))
    text = " | ".join(names)
    return f"{text}, optional" if type(None) in typing.get_args(annotation) else text


def _constraints(field: Any) -> str:
    parts = []
    for item in field.metadata:
        for attr, symbol in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            bound = getattr(item, attr, None)
            if bound is not None:
                parts.append(f"{symbol} {bound}")
    return ", ".join(parts)


def _wrap(text: str, width: int = 106) -> list[str]:
    return textwrap.wrap(text, width=width, break_on_hyphens=False) or [""]


def _render_table(dotted: str, model: type[BaseModel], intro: str, out: list[str]) -> None:
    out.append(f"[{dotted}]")
    doc = intro or (model.__doc__ or "").strip()
    if doc:
        out.extend(f"# {line}" for line in _wrap(" ".join(doc.split())))
    tables: list[tuple[str, type[BaseModel], str]] = []
    scalars = 0
    for name, field in model.model_fields.items():
        sub = submodel(field.annotation)
        if sub is not None:
            tables.append((f"{dotted}.{name}", sub, field.description or ""))
            continue
        scalars += 1
        out.append("")
        if field.description:
            out.extend(f"# {line}" for line in _wrap(" ".join(field.description.split())))
        kind = _type_name(field.annotation)
        bounds = _constraints(field)
        if model is InstanceSettings and name == "id":
            default_text, value = "<hostname>-<pid>", None
        elif model is AdminSettings and name == "mode":
            value = field.get_default()
            default_text, bounds = f"0o{value:o}", "an octal file mode"
        else:
            value = field.get_default(call_default_factory=True)
            default_text = "unset" if value is None else _toml_value(value)
        out.append(f"# ({kind}{'; ' + bounds if bounds else ''}; default: {default_text})")
        if value is None:
            example = (field.examples or ["..."])[0]
            out.append(f"# {name} = {_toml_value(example)}")
        elif model is AdminSettings and name == "mode":
            out.append(f"{name} = 0o{value:o}")
        else:
            out.append(f"{name} = {_toml_value(value)}")
    if not scalars and not tables:
        out.append("# (no keys yet)")
    out.append("")
    out.append("")
    for sub_dotted, sub_model, sub_intro in tables:
        _render_table(sub_dotted, sub_model, sub_intro, out)


def render_example() -> str:
    """The annotated example configuration (``config/sightscreen.example.toml``), from the models."""
    out = [_EXAMPLE_HEADER]
    for section, section_field in Config.model_fields.items():
        model = submodel(section_field.annotation)
        assert model is not None
        _render_table(section, model, "", out)
    return "\n".join(out).rstrip() + "\n"
