"""The shipped rules, their promtool tests, the dashboard and the runbook agree with each other and with the
metrics the daemon exports. Fast, no Prometheus needed, except the promtool runs (skipped without it; the
live evaluation is tests/deploy/test_live_observability.py)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from daemon import metrics
from tests.harness import tools

ROOT = Path(__file__).resolve().parents[2]
PROM_DIR = ROOT / "deploy" / "prometheus"
RULES = PROM_DIR / "sightscreen-rules.yml"
RULE_TESTS = PROM_DIR / "sightscreen-rules.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "sightscreen.json"
RUNBOOK = ROOT / "docs" / "runbook.md"


def _rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def _alerts() -> list[dict[str, Any]]:
    return [rule for rule in _rules() if "alert" in rule]


def _exported_names() -> set[str]:
    """Every series name the daemon's registry can produce (counters' _total, histograms' parts)."""
    names: set[str] = set()
    for family in metrics.REGISTRY.collect():
        if family.type == "counter":
            names |= {family.name + "_total", family.name + "_created"}
        elif family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_count", "_sum", "_created")}
        else:
            names.add(family.name)
    return names


def _selectors(expr: str) -> set[str]:
    return set(re.findall(r"\b((?:sightscreen|process)_[a-z0-9_]+)\b", expr))


def _alarm_sections() -> set[str]:
    """The runbook sections the AWS template's CloudWatch alarms name in their descriptions."""
    from tests.harness.aws_stack import load_template

    sections: set[str] = set()
    for logical, resource in load_template()["Resources"].items():
        if resource["Type"] == "AWS::CloudWatch::Alarm":
            description = json.dumps(resource["Properties"]["AlarmDescription"])  # a string or a !Sub
            (anchor,) = re.findall(r"Runbook: docs/runbook\.md#([a-z0-9-]+)", description) or [None]
            assert anchor is not None, f"{logical} names no runbook section"
            sections.add(anchor)
    return sections


def test_every_alert_has_a_severity_a_summary_and_a_runbook_section() -> None:
    runbook = RUNBOOK.read_text()
    headings = {h.strip().lower() for h in re.findall(r"^## (.+)$", runbook, flags=re.M)}
    for alert in _alerts():
        name = alert["alert"]
        assert alert["labels"]["severity"] in {"warning", "critical"}, name
        notes = alert["annotations"]
        assert notes["summary"] and notes["description"], name
        assert notes["runbook_url"] == f"docs/runbook.md#{name.lower()}", name
        assert name.lower() in headings, f"docs/runbook.md has no section for {name}"
    section_names = {a["alert"].lower() for a in _alerts()} | _alarm_sections()
    assert headings == section_names, "the runbook has a section for each alert and each alarm, and no other"


def test_every_runbook_section_says_what_users_see_how_to_confirm_and_what_to_do() -> None:
    alarms = _alarm_sections()
    sections = re.split(r"^## ", RUNBOOK.read_text(), flags=re.M)[1:]
    for section in sections:
        title = section.splitlines()[0]
        assert "**Users:**" in section, title
        assert "**Confirm" in section, title
        assert "**Do" in section or "Confirm and do" in section, title
        if title.strip().lower() in alarms:  # an AWS alarm: confirmed with the AWS CLI
            assert "`aws " in section, f"{title}: no command to confirm it"
        else:
            assert "sightscreen ctl" in section or "systemctl" in section, (
                f"{title}: no command to confirm it"
            )


def test_every_alert_is_unit_tested_firing_and_staying_quiet() -> None:
    cases = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in cases:
        for check in case.get("alert_rule_test", []):
            (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {a["alert"] for a in _alerts()}
    assert names - fired == set(), "alerts never shown to fire"
    assert names - quiet == set(), "alerts never shown to stay quiet"


def test_rules_and_dashboard_read_only_metrics_the_daemon_exports() -> None:
    exported = _exported_names()
    used: set[str] = set()
    for rule in _rules():
        used |= _selectors(rule["expr"])
    board = json.loads(DASHBOARD.read_text())
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            used |= _selectors(target["expr"])
    assert used - exported == set(), "names no metric of daemon.metrics produces"


def test_the_dashboard_has_the_overview_and_the_five_rows_and_region_and_instance_variables() -> None:
    board = json.loads(DASHBOARD.read_text())
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["Overview", "APNs", "SportMonks", "DynamoDB", "Ownership", "Process"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert {"datasource", "region", "instance"} <= set(variables)
    overview: list[str] = []
    for panel in board["panels"]:
        if panel["type"] == "row" and panel["title"] != "Overview" and overview:
            break
        if panel["type"] != "row":
            overview.append(panel["title"])
    for wanted in ("Live matches", "Ball-to-push lag", "Pushes per second by outcome", "Errors per second"):
        assert wanted in overview
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            assert "$region" in target["expr"], f"{panel['title']}: not filtered by region"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"


def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    PROMTOOL = tools.promtool()
    if PROMTOOL is None:
        pytest.skip(
            "promtool is not installed and cannot be here (Debian: apt-get install prometheus, as root)"
        )
    check = subprocess.run(
        [PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run(
        [PROMTOOL, "test", "rules", RULE_TESTS.name],
        cwd=PROM_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_demo_serves_metrics_where_told_and_refuses_a_bad_address(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from daemon.commands.demo import parse_args

    assert parse_args(["--metrics-listen", "127.0.0.1:9464"]).metrics_listen == "127.0.0.1:9464"
    assert parse_args([]).metrics_listen == "", "by default the demo exposes metrics on its admin socket only"
    with pytest.raises(SystemExit):
        parse_args(["--metrics-listen", "9464"])
    assert "--metrics-listen: expected HOST:PORT" in capsys.readouterr().err
