"""The region's CloudFormation template (deploy/aws/sightscreen-region.yaml): its tables are the daemon's table
specs, it deploys into CloudFormation (moto's, on loopback) and ``sightscreen tables check`` passes against the
tables it made, its roles are exact, each service's container environment is a configuration the daemon
accepts, and cfn-lint finds nothing. Whether the roles grant what the engine and the API call is the policy
gate's (tests/harness/aws_policy_gate.py), from what the end-to-end tests recorded."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from daemon.config.credentials import credential_problems
from daemon.config.loading import load_config
from daemon.store.tables import TABLE_SPECS
from tests.harness.aws_stack import (
    REGION,
    TASK_ROLES,
    TEMPLATE,
    Deployed,
    client,
    default_parameters,
    deploy,
    load_template,
    make_network,
)
from tests.harness.dynamodb_iam import granted_permissions

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _tables(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The template's table resources by the logical table name their TableName gives after the prefix."""
    out: dict[str, dict[str, Any]] = {}
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::DynamoDB::Table":
            name = resource["Properties"]["TableName"]["Fn::Sub"]
            assert name.startswith("${TablePrefix}"), name
            out[name.removeprefix("${TablePrefix}")] = resource
    return out


def test_the_templates_tables_are_the_daemons_table_specs() -> None:
    tables = _tables(load_template())
    assert set(tables) == set(TABLE_SPECS)
    for logical, spec in TABLE_SPECS.items():
        resource = tables[logical]
        props = resource["Properties"]
        want = spec.create_params("unused")
        assert props["BillingMode"] == want["BillingMode"] == "PAY_PER_REQUEST", logical
        assert props["KeySchema"] == want["KeySchema"], logical
        assert sorted(props["AttributeDefinitions"], key=str) == sorted(want["AttributeDefinitions"], key=str)
        assert props.get("GlobalSecondaryIndexes", []) == want.get("GlobalSecondaryIndexes", []), logical
        ttl = props.get("TimeToLiveSpecification")
        if spec.ttl_attribute is None:
            assert ttl is None, logical
        else:
            assert ttl == {"AttributeName": spec.ttl_attribute, "Enabled": True}, logical
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert props["DeletionProtectionEnabled"] is True
        assert props["SSESpecification"]["SSEEnabled"] is True
        # a stack deleted, or a change that would replace a table, leaves the data where it is
        assert resource["DeletionPolicy"] == resource["UpdateReplacePolicy"] == "Retain", logical


@pytest.fixture(scope="module")
def stack() -> Any:
    """The template deployed once for this module's tests, in a test AWS of its own (a quiet peer: no role
    key is used against it, so nothing reaches the policy gate's recording)."""
    from tests.harness.aws_peer import AwsPeer

    with AwsPeer() as peer:
        prefix = f"t{uuid.uuid4().hex[:8]}-"
        deployed = deploy(peer.url, "region", default_parameters(prefix, make_network(peer.url)))
        yield peer, prefix, deployed


def test_sightscreen_tables_check_passes_against_the_tables_the_stack_made(stack: Any) -> None:
    peer, prefix, _ = stack
    check = subprocess.run(
        [sys.executable, "-m", "daemon", "tables", "check", "--endpoint-url", peer.url, "--region", REGION]
        + ["--prefix", prefix],
        capture_output=True,
        text=True,
        timeout=120,
        env={"AWS_ACCESS_KEY_ID": "operator", "AWS_SECRET_ACCESS_KEY": "x", "PATH": "/usr/bin:/bin"},
        cwd=PROJECT_ROOT,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    # and with another prefix nothing is there: the check is not vacuous
    other = subprocess.run(
        [sys.executable, "-m", "daemon", "tables", "check", "--endpoint-url", peer.url, "--region", REGION]
        + ["--prefix", "nothing-here-"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"AWS_ACCESS_KEY_ID": "operator", "AWS_SECRET_ACCESS_KEY": "x", "PATH": "/usr/bin:/bin"},
        cwd=PROJECT_ROOT,
    )
    assert other.returncode == 1 and "table is missing" in other.stdout


def test_the_stacks_tables_are_on_demand_recoverable_protected_and_encrypted(stack: Any) -> None:
    peer, prefix, _ = stack
    dynamodb = client(peer.url, "dynamodb")
    for logical in TABLE_SPECS:
        name = f"{prefix}{logical}"
        table = dynamodb.describe_table(TableName=name)["Table"]
        assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
        assert table["DeletionProtectionEnabled"] is True
        assert table["SSEDescription"]["Status"] == "ENABLED"
        backups = dynamodb.describe_continuous_backups(TableName=name)["ContinuousBackupsDescription"]
        assert backups["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"] == "ENABLED"


def test_the_roles_name_each_resource_and_only_the_task_roles_touch_dynamodb(stack: Any) -> None:
    _, prefix, deployed = stack
    for role, logical in TASK_ROLES.items():
        granted: set[Any] = set()
        for document in deployed.role_policies[logical]:
            got, loose = granted_permissions(document, prefix)
            assert loose == [], f"{role}: {loose}"
            granted |= got
        assert granted, f"{role} is granted no DynamoDB action"
    for logical, documents in deployed.role_policies.items():
        for document in documents:
            for statement in document["Statement"]:
                actions = (
                    statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                )
                assert all("*" not in a for a in actions), (logical, actions)
                if logical not in TASK_ROLES.values():
                    assert not any(a.startswith("dynamodb:") for a in actions), (logical, actions)
                if statement["Resource"] == "*":  # only where IAM has no resource-level permission
                    assert actions == ["ecr:GetAuthorizationToken"], (logical, actions)


def _task_definition(peer_url: str, deployed: Deployed, logical: str) -> dict[str, Any]:
    arn = deployed.resources[logical][1]
    return dict(client(peer_url, "ecs").describe_task_definition(taskDefinition=arn)["taskDefinition"])


@pytest.mark.parametrize("service", ["engine", "api"])
def test_each_services_container_environment_is_a_configuration_the_daemon_accepts(
    stack: Any, service: str, tmp_path: Path
) -> None:
    from daemon.apns.certs import generate_signing_key

    peer, prefix, deployed = stack
    definition = _task_definition(peer.url, deployed, f"{service.title()}TaskDefinition")
    (daemon,) = [c for c in definition["containerDefinitions"] if c["name"] == "sightscreen"]
    env = {e["name"]: e["value"] for e in daemon.get("environment", [])}
    secrets = {s["name"]: s["valueFrom"] for s in daemon.get("secrets", [])}
    # secrets come from Secrets Manager by ARN, never as values in the task definition
    assert all(arn.startswith("arn:aws:secretsmanager:") for arn in secrets.values())
    assert not any("PRIVATE KEY" in value for value in env.values())
    if service == "engine":
        apns = deployed.outputs["ApnsKeySecretArn"]
        assert secrets == {
            # the key and its id from one version of one secret: a rotation changes both at once
            "SIGHTSCREEN_APNS__KEY_ID": f"{apns}:keyId::",
            "SIGHTSCREEN_APNS__PRIVATE_KEY": f"{apns}:privateKey::",
            "SIGHTSCREEN_SPORTMONKS__API_TOKEN": deployed.outputs["SportMonksTokenSecretArn"],
        }
        # ECS sets them from the secrets when the task starts
        env["SIGHTSCREEN_APNS__KEY_ID"] = "KEY1234567"
        env["SIGHTSCREEN_APNS__PRIVATE_KEY"] = generate_signing_key("KEY1234567").private_pem
        env["SIGHTSCREEN_SPORTMONKS__API_TOKEN"] = "a-token"
    else:
        assert secrets == {}, "the API needs neither secret"
    env["SIGHTSCREEN_ADMIN__SOCKET_PATH"] = str(tmp_path / "admin.sock")  # the image sets /run/sightscreen
    # the image's configuration file is the annotated example (Dockerfile), overridden by the environment
    config = load_config(PROJECT_ROOT / "config" / "sightscreen.example.toml", env=env)
    assert credential_problems(config, env=env) == []
    assert config.instance.roles == [service]
    assert config.dynamodb.table_prefix == prefix and config.dynamodb.region == REGION
    assert config.logging.format == "json"
    # SIGTERM leaves the daemon its whole grace, and more, before SIGKILL; the template's grace is at most 100
    grace = load_template()["Parameters"]["ShutdownGraceSeconds"]
    assert daemon["stopTimeout"] > grace["MaxValue"] >= config.instance.shutdown_grace_s
    assert config.api.shutdown_grace_s < daemon["stopTimeout"]
    # logs: the JSON lines on stderr to CloudWatch; metrics: the collector beside it scrapes [metrics].listen
    assert daemon["logConfiguration"]["logDriver"] == "awslogs"
    (collector,) = [c for c in definition["containerDefinitions"] if c["name"] == "metrics"]
    (collector_config,) = [e["value"] for e in collector["environment"] if e["name"] == "AOT_CONFIG_CONTENT"]
    assert f'"{config.metrics.listen}"' in collector_config
    if service == "engine":
        assert config.apns.team_id == "TEAM123456" and config.apns.topic == "app.sightscreen.ios"
    else:
        assert config.auth.user_pool_id == f"{REGION}_AbCdEf123"
        assert config.auth.client_ids == ["clientone", "clienttwo"]
        assert config.auth.region == REGION
        assert daemon["portMappings"][0]["containerPort"] == int(config.api.listen.rsplit(":", 1)[1])


def test_the_api_is_behind_the_load_balancer_with_readyz_as_its_health_check(stack: Any) -> None:
    peer, _, deployed = stack
    elb = client(peer.url, "elbv2")
    (group,) = elb.describe_target_groups(TargetGroupArns=[deployed.resources["ApiTargetGroup"][1]])[
        "TargetGroups"
    ]
    assert group["HealthCheckPath"] == "/readyz" and group["Port"] == 8080
    (listener,) = elb.describe_listeners(LoadBalancerArn=deployed.resources["LoadBalancer"][1])["Listeners"]
    assert listener["Protocol"] == "HTTPS" and listener["Port"] == 443
    services = client(peer.url, "ecs").describe_services(
        cluster=deployed.outputs["ClusterName"], services=["engine", "api"]
    )["services"]
    by_name = {s["serviceName"]: s for s in services}
    assert by_name["engine"]["desiredCount"] == 2 and by_name["api"]["desiredCount"] == 2
    # moto's ECS leaves a service's load balancers out of what it describes: read them from the template
    resources = load_template()["Resources"]
    (target,) = resources["ApiService"]["Properties"]["LoadBalancers"]
    assert target == {
        "ContainerName": "sightscreen",
        "ContainerPort": 8080,
        "TargetGroupArn": {"Ref": "ApiTargetGroup"},
    }
    assert "LoadBalancers" not in resources["EngineService"]["Properties"]


def test_cfn_lint_finds_nothing_in_the_template() -> None:
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("cfn-lint")),
            "--non-zero-exit-code",
            "informational",
            str(TEMPLATE),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
