"""The policy gate: the DynamoDB permissions the engine and the API used across a run of the suite, against
what the AWS template's role policies grant. pytest hooks, imported by ``tests/conftest.py``.

How it works:

- Every worker's session DynamoDB (``tests/harness/aws_peer.py``) appends the permissions each service role
  needed to ``$SIGHTSCREEN_DYNAMODB_RECORD_DIR/<pid>.jsonl``; the end-to-end rigs run the engine and the API
  with the roles' own access keys (``tests/harness/dynamodb_iam.py``), the way IAM tells them apart.
- When the run ends, the process that ran the session (xdist's controller, or the only process) deploys the
  template into a fresh test AWS, reads each role's policy as CloudFormation resolved it, and fails the run
  if a role used a permission its policy does not grant (production would answer AccessDenied), or if the
  policy is not exact (a wildcard, a table outside the specs).
- Once every test that drives the roles has run and passed (``tests/e2e`` and ``tests/faults`` whole and the
  API role's tour, with no ``-k``, ``-m`` or deselection), it also fails the run on a permission granted that no test used:
  least privilege, kept honest by the recording rather than by a hand-kept list.

Both lists are derived from the recording and the template alone, so when branches merge and the daemon's
calls change, the gate says exactly which lines of the template to change. What no test drives is checked
statically, in the fast set: ``tests/harness/store_grants.py`` (every repository method's permissions read
from the store's source, against each role's declared calls and the template's grants).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.harness.dynamodb_iam import Permission, compare, granted_permissions, read_recording

RECORD_ENV = "SIGHTSCREEN_DYNAMODB_RECORD_DIR"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
# The tests that drive the service roles' processes: all must have run for "granted but unused" to count.
SOURCES = ("tests/e2e/", "tests/faults/", "tests/deploy/test_aws_api_role.py")
# each test's outcomes as this process saw them (xdist's controller sees every worker's reports)
_OUTCOMES: dict[str, set[str]] = defaultdict(set)
_owned_dir = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    # the controller (or the only process) picks the folder; xdist's workers inherit the environment
    if not hasattr(config, "workerinput") and RECORD_ENV not in os.environ:
        folder = tempfile.mkdtemp(prefix="sightscreen-dynamodb-record-")
        os.environ[RECORD_ENV] = folder
        config.stash[_owned_dir] = folder


def recording_path(config: pytest.Config) -> Path:
    """Where this process's session DynamoDB appends the roles' permissions."""
    folder = Path(os.environ.get(RECORD_ENV) or tempfile.mkdtemp(prefix="sightscreen-dynamodb-record-"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{os.getpid()}.jsonl"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.outcome != "passed":
        _OUTCOMES[report.nodeid].add(report.outcome)


def _complete(config: pytest.Config) -> tuple[bool, str]:
    """Whether every test that drives the roles ran and passed in this session, and if not, why."""
    option = config.option
    if getattr(option, "keyword", "") or getattr(option, "markexpr", "") or getattr(option, "deselect", None):
        return False, "tests were selected with -k, -m or --deselect"
    if any("::" in str(arg) for arg in config.args):
        return False, "single tests were named"
    outcomes = _OUTCOMES
    for source in SOURCES:
        if source.endswith(".py"):
            files = [source]
        else:
            files = [
                str(p.relative_to(PROJECT_ROOT)) for p in sorted((PROJECT_ROOT / source).glob("test_*.py"))
            ]
        for file in files:
            ran = {nodeid: seen for nodeid, seen in outcomes.items() if nodeid.split("::", 1)[0] == file}
            if not ran:
                return False, f"{file} did not run"
            failed = [nodeid for nodeid, seen in ran.items() if "failed" in seen]
            if failed:
                return False, f"{failed[0]} failed"
    return True, ""


def check(records: list[tuple[str, Permission]], complete: bool) -> list[str]:
    """Problems of the template's role policies against the recorded permissions, each role's with the
    statements that would grant exactly what it used; [] when they agree."""
    from tests.harness.aws_peer import AwsPeer
    from tests.harness.aws_stack import TASK_ROLES, default_parameters, deploy, make_network

    prefix = "gate-"
    with AwsPeer() as peer:
        deployed = deploy(peer.url, "policy-gate", default_parameters(prefix, make_network(peer.url)))
    used: dict[str, set[Permission]] = defaultdict(set)
    for role, permission in records:
        used[role].add(permission)
    problems: list[str] = []
    for role, logical in TASK_ROLES.items():
        granted: set[Permission] = set()
        for document in deployed.role_policies[logical]:
            got, loose = granted_permissions(document, prefix)
            granted |= got
            problems += [f"{role} ({logical}): {why}" for why in loose]
        missing, unused = compare(used[role], granted)
        found = [f"{role} ({logical}) used {p} but its policy does not grant it" for p in missing]
        if complete:
            found += [f"{role} ({logical}) is granted {p} but no test used it" for p in unused]
        if found:
            exact = used[role] if complete else used[role] | granted
            found.append(
                f"{logical}'s dynamodb statements that grant what it used:\n{statements_yaml(exact)}"
            )
        problems += found
    return problems


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput"):
        return
    folder = os.environ.get(RECORD_ENV)
    try:
        records: list[tuple[str, Permission]] = []
        for path in sorted(Path(folder).glob("*.jsonl")) if folder else []:
            records += list(read_recording(path.read_text().splitlines()))
        if not records:
            return
        complete, why = _complete(config)
        problems = check(records, complete)
        reporter: Any = config.pluginmanager.get_plugin("terminalreporter")
        roles = sorted({role for role, _ in records})
        scope = "both ways" if complete else f"used against granted only ({why})"
        if problems:
            if reporter is not None:
                reporter.write_sep(
                    "=", "AWS role policies against the recorded DynamoDB calls: FAILED", red=True
                )
                for line in problems:
                    reporter.write_line(f"  {line}")
                reporter.write_line(
                    "  (deploy/aws/sightscreen-region.yaml, the EngineTaskRole and ApiTaskRole policies)"
                )
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        elif reporter is not None:
            reporter.write_line(
                f"AWS role policies match the recorded DynamoDB calls of {', '.join(roles)}: "
                f"{len(set(records))} permissions, checked {scope}"
            )
    finally:
        owned = config.stash.get(_owned_dir, None)
        if owned is not None:
            shutil.rmtree(owned, ignore_errors=True)


def statements_yaml(permissions: set[Permission], indent: int = 14) -> str:
    """The policy statements that grant exactly ``permissions``, as the template writes them: one statement per
    table or index, its actions sorted. Printed by the gate when a role's policy and its calls disagree."""
    from tests.harness.aws_stack import load_template

    logical_ids = {
        str(resource["Properties"]["TableName"]["Fn::Sub"]).replace("${TablePrefix}", ""): logical
        for logical, resource in load_template()["Resources"].items()
        if resource["Type"] == "AWS::DynamoDB::Table"
    }
    by_resource: dict[tuple[str, str | None], list[str]] = defaultdict(list)
    for p in permissions:
        by_resource[(p.table, p.index)].append(f"dynamodb:{p.action}")
    pad = " " * indent
    lines: list[str] = []
    for (table, index), actions in sorted(by_resource.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        table_id = logical_ids[table]
        resource = f"!GetAtt {table_id}.Arn" if index is None else f'!Sub "${{{table_id}.Arn}}/index/{index}"'
        sid = table_id if index is None else table_id + "".join(w.title() for w in index.split("-"))
        lines += [
            f"{pad}- Sid: {sid}",
            f"{pad}  Effect: Allow",
            f"{pad}  Action: [{', '.join(sorted(actions))}]",
            f"{pad}  Resource: {resource}",
        ]
    return "\n".join(lines)
