"""The region's CloudFormation template (deploy/aws/sightscreen-region.yaml): its tables are the daemon's table
specs, it deploys into CloudFormation (moto's, on loopback) and ``sightscreen tables check`` passes against the
tables it made, its roles are exact, each service's container environment is a configuration the daemon
accepts, and cfn-lint finds nothing. The operations around it: a first create that fails leaves nothing a retry
trips on, the secrets are never written by the stack and only the engine (and a break-glass role) reads the
APNs key, the counts start at 0, the load balancer checks the shallow health endpoint, the API autoscales
between its bounds, ECS Exec exists only when switched on, the collector labels each task's series, and the
alarms go to the stack's topic. Two stacks are deployed: the first create as docs/deploy-aws.md runs it, and a
running region with every option on. Whether the roles grant what the engine and the API call is the policy
gate's (tests/harness/aws_policy_gate.py), from what the end-to-end tests recorded."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

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
        # on, except in the first create (the parameter's default is on: an update that omits it keeps it on)
        assert props["DeletionProtectionEnabled"] == {"Ref": "TableDeletionProtection"}
        assert props["SSESpecification"]["SSEEnabled"] is True
        # a stack deleted, or a change that would replace a table, leaves the data where it is; only the
        # rollback of the create that made them deletes them (new and empty), so a retry finds the names free
        assert resource["DeletionPolicy"] == "RetainExceptOnCreate", logical
        assert resource["UpdateReplacePolicy"] == "Retain", logical


BREAK_GLASS = "arn:aws:iam::123456789012:role/ops/sightscreen-break-glass"
ON_CALL = "oncall@sightscreen.test"
ACCESS_LOGS = "sightscreen-test-elb-logs"


@pytest.fixture(scope="module")
def peer() -> Any:
    """A test AWS of this module's own (a quiet peer: no role key is used against it, so nothing reaches the
    policy gate's recording)."""
    from tests.harness.aws_peer import AwsPeer

    with AwsPeer() as started:
        yield started


@pytest.fixture(scope="module")
def stack(peer: Any) -> Any:
    """A running region: both services at 2, ECS Exec on, a break-glass role, an on-call address, the load
    balancer's access logs on."""
    prefix = f"t{uuid.uuid4().hex[:8]}-"
    parameters = default_parameters(prefix, make_network(peer.url))
    parameters.update(
        EnableExecuteCommand="true",
        BreakGlassRoleArn=BREAK_GLASS,
        AlarmEmail=ON_CALL,
        AccessLogsBucket=ACCESS_LOGS,
    )
    yield peer, prefix, deploy(peer.url, "region", parameters)


@pytest.fixture(scope="module")
def first_create(peer: Any) -> Any:
    """The first create as docs/deploy-aws.md runs it: no count given, both deletion protections off."""
    prefix = f"f{uuid.uuid4().hex[:8]}-"
    parameters = {
        k: v for k, v in default_parameters(prefix, make_network(peer.url)).items() if not k.endswith("Count")
    }
    parameters.update(TableDeletionProtection="false", LoadBalancerDeletionProtection="false")
    yield peer, prefix, deploy(peer.url, "first", parameters)


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


# The actions IAM has no resource-level permission for, which the roles grant on "*": the registry login ECS
# pulls the image with, and (ECS Exec only) Session Manager's channels and the agent's look for its log group.
UNSCOPED = {
    "ecr:GetAuthorizationToken",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
    "logs:DescribeLogGroups",
}


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return list(action) if isinstance(action, list) else [action]


@pytest.mark.parametrize("which", ["stack", "first_create"])
def test_the_roles_name_each_resource_and_only_the_task_roles_touch_dynamodb(
    which: str, request: pytest.FixtureRequest
) -> None:
    _, prefix, deployed = request.getfixturevalue(which)
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
                actions = _actions(statement)
                assert all("*" not in a for a in actions), (logical, actions)
                if logical not in TASK_ROLES.values():
                    assert not any(a.startswith("dynamodb:") for a in actions), (logical, actions)
                if statement["Resource"] == "*":  # only where IAM has no resource-level permission
                    assert set(actions) <= UNSCOPED, (logical, actions)


def test_ecs_exec_exists_only_when_switched_on_with_its_sessions_logged_encrypted(
    stack: Any, first_create: Any
) -> None:
    _, _, running = stack
    _, _, fresh = first_create
    exec_policy = {
        "ssmmessages:CreateControlChannel",
        "ssmmessages:CreateDataChannel",
        "ssmmessages:OpenControlChannel",
        "ssmmessages:OpenDataChannel",
        "logs:DescribeLogGroups",
        "logs:CreateLogStream",
        "logs:DescribeLogStreams",
        "logs:PutLogEvents",
        "kms:Decrypt",
    }
    exec_log = running.outputs["ExecLogGroupName"]
    for logical in TASK_ROLES.values():
        (document,) = [
            d for d in running.role_policies[logical] if _actions(d["Statement"][0])[0].startswith("ssm")
        ]
        assert {a for st in document["Statement"] for a in _actions(st)} == exec_policy, logical
        resources = {a: st["Resource"] for st in document["Statement"] for a in _actions(st)}
        assert resources["logs:PutLogEvents"].endswith(f":log-group:{exec_log}")
        assert ":key/" in resources["kms:Decrypt"]
        # switched off, the task roles have nothing but their DynamoDB and metrics policies
        off = {a for d in fresh.role_policies[logical] for st in d["Statement"] for a in _actions(st)}
        assert not {a for a in off if a.split(":")[0] in ("ssmmessages", "logs", "kms")}, (logical, off)
    assert "ExecLogGroupName" not in fresh.outputs and "ExecLogGroup" not in fresh.resources
    # moto's ECS keeps neither a cluster's configuration nor a service's exec flag: read them from the template
    resources = load_template()["Resources"]
    for service in ("EngineService", "ApiService"):
        assert resources[service]["Properties"]["EnableExecuteCommand"] == {
            "Fn::If": ["ExecEnabled", True, False]
        }
    configuration = resources["Cluster"]["Properties"]["Configuration"]["Fn::If"]
    assert configuration[0] == "ExecEnabled" and configuration[2] == {"Ref": "AWS::NoValue"}
    logging = configuration[1]["ExecuteCommandConfiguration"]
    assert logging["Logging"] == "OVERRIDE" and logging["KmsKeyId"] == {"Ref": "OperationsKey"}
    assert logging["LogConfiguration"] == {
        "CloudWatchLogGroupName": {"Ref": "ExecLogGroup"},
        "CloudWatchEncryptionEnabled": True,
    }
    assert resources["ExecLogGroup"]["Condition"] == "ExecEnabled"
    assert resources["TaskExecPolicy"]["Condition"] == "ExecEnabled"
    for group in ("EngineLogGroup", "ApiLogGroup", "ExecLogGroup"):
        assert resources[group]["Properties"]["KmsKeyId"] == {"Fn::GetAtt": ["OperationsKey", "Arn"]}
    assert load_template()["Parameters"]["EnableExecuteCommand"]["Default"] == "false"


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
    (scrape,) = yaml.safe_load(collector_config)["receivers"]["prometheus"]["config"]["scrape_configs"]
    assert scrape["static_configs"][0]["targets"] == [config.metrics.listen]
    if service == "engine":
        assert config.apns.team_id == "TEAM123456" and config.apns.topic == "app.sightscreen.ios"
    else:
        assert config.auth.user_pool_id == f"{REGION}_AbCdEf123"
        assert config.auth.client_ids == ["clientone", "clienttwo"]
        assert config.auth.region == REGION
        assert daemon["portMappings"][0]["containerPort"] == int(config.api.listen.rsplit(":", 1)[1])


@pytest.mark.parametrize("service", ["engine", "api"])
def test_the_collector_labels_every_series_with_the_task_id_region_and_role(stack: Any, service: str) -> None:
    """What the Prometheus rules' ECS forms read (deploy/prometheus/sightscreen-rules.yml): `instance` is the
    task's id, from the ecs resource detector's aws.ecs.task.id made the resource's service.instance.id (the
    remote-write exporter's `instance`), and `region` and `role` are labels of the scrape itself, so `up`
    carries them too. No other resource attribute becomes a label (resource_to_telemetry_conversion is off)."""
    peer, _, deployed = stack
    definition = _task_definition(peer.url, deployed, f"{service.title()}TaskDefinition")
    (collector,) = [c for c in definition["containerDefinitions"] if c["name"] == "metrics"]
    (text,) = [e["value"] for e in collector["environment"] if e["name"] == "AOT_CONFIG_CONTENT"]
    config = yaml.safe_load(text)
    (scrape,) = config["receivers"]["prometheus"]["config"]["scrape_configs"]
    assert scrape["job_name"] == "sightscreen"
    assert scrape["static_configs"][0]["labels"] == {"role": service, "region": REGION}
    assert "ecs" in config["processors"]["resourcedetection"]["detectors"]
    assert config["processors"]["resource"]["attributes"] == [
        {"key": "service.instance.id", "from_attribute": "aws.ecs.task.id", "action": "upsert"}
    ]
    (pipeline,) = config["service"]["pipelines"].values()
    assert pipeline["processors"] == ["resourcedetection", "resource"]  # detected first, then copied
    exporter = config["exporters"]["prometheusremotewrite"]
    assert "resource_to_telemetry_conversion" not in exporter
    assert exporter["endpoint"] == deployed.outputs["PrometheusRemoteWriteUrl"]


def test_the_load_balancer_checks_the_shallow_healthz_and_the_api_serves_it_without_dynamodb(
    stack: Any,
) -> None:
    peer, _, deployed = stack
    elb = client(peer.url, "elbv2")
    (group,) = elb.describe_target_groups(TargetGroupArns=[deployed.resources["ApiTargetGroup"][1]])[
        "TargetGroups"
    ]
    assert group["HealthCheckPath"] == "/healthz" and group["Port"] == 8080
    assert _healthz_answers_while_dynamodb_does_not(), "/healthz must not depend on DynamoDB or the JWKS"
    (listener,) = elb.describe_listeners(LoadBalancerArn=deployed.resources["LoadBalancer"][1])["Listeners"]
    assert listener["Protocol"] == "HTTPS" and listener["Port"] == 443
    services = client(peer.url, "ecs").describe_services(
        cluster=deployed.outputs["ClusterName"], services=["engine", "api"]
    )["services"]
    by_name = {s["serviceName"]: s for s in services}
    assert by_name["engine"]["desiredCount"] == 2 and by_name["api"]["desiredCount"] == 2
    assert "LoadBalancers" not in load_template()["Resources"]["EngineService"]["Properties"]
    # moto's ECS leaves a service's load balancers out of what it describes: read them from the template
    resources = load_template()["Resources"]
    (target,) = resources["ApiService"]["Properties"]["LoadBalancers"]
    assert target == {
        "ContainerName": "sightscreen",
        "ContainerPort": 8080,
        "TargetGroupArn": {"Ref": "ApiTargetGroup"},
    }


def _healthz_answers_while_dynamodb_does_not() -> bool:
    """The API's app, its DynamoDB a loopback port nothing listens on: /healthz answers 200 while /readyz
    answers 503 (the difference the load balancer's check rests on: a DynamoDB blip fails readiness, not
    health)."""
    import socket

    import httpx
    import trio

    from daemon.api.app import ApiState, build_app
    from daemon.api.auth import Authenticator, JwksKeys
    from daemon.api.settings import ApiSettings, AuthSettings
    from daemon.demo.issuer import LocalIssuer
    from daemon.store import Dynamo, DynamoSettings, Repositories

    with socket.socket() as probe:  # a port that was free a moment ago: connections to it are refused
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"

    async def answers(issuer: LocalIssuer) -> tuple[int, int]:
        auth = AuthSettings(issuer=issuer.issuer, jwks_url=issuer.jwks_url, client_ids=[issuer.client_id])
        keys = JwksKeys(auth.effective_jwks_url(), refresh_s=auth.jwks_refresh_s, refetch_cooldown_s=60.0)
        await keys.fetch("start")
        dynamo = Dynamo(DynamoSettings(endpoint_url=dead, region=REGION, max_attempts=1))
        try:
            state = ApiState(
                repos=Repositories(dynamo), auth=Authenticator(keys, auth), keys=keys, settings=ApiSettings()
            )
            transport = httpx.ASGITransport(app=build_app(state))
            async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
                return (await http.get("/healthz")).status_code, (await http.get("/readyz")).status_code
        finally:
            dynamo.close()

    with LocalIssuer().serve() as issuer:
        healthz, readyz = trio.run(answers, issuer)
    return healthz == 200 and readyz == 503


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


# --- the first create and the retries after it -----------------------------------------------------------------


def test_a_failed_first_create_leaves_nothing_behind_that_a_retry_would_trip_on() -> None:
    """Every resource kept past its stack is kept only from its first successful create on (the rollback of
    a failed create deletes it: new and empty, and under a fixed name the retry needs), and the two deletion
    protections, which would stop that rollback, are parameters that default to on."""
    template = load_template()
    kept = {
        logical: resource
        for logical, resource in template["Resources"].items()
        if resource.get("DeletionPolicy", "Delete") != "Delete"
    }
    assert {r["Type"] for r in kept.values()} == {"AWS::DynamoDB::Table", "AWS::SecretsManager::Secret"}
    assert len(kept) == len(TABLE_SPECS) + 2
    for logical, resource in kept.items():
        assert resource["DeletionPolicy"] == "RetainExceptOnCreate", logical
        assert resource["UpdateReplacePolicy"] == "Retain", logical
    for name in ("TableDeletionProtection", "LoadBalancerDeletionProtection"):
        assert template["Parameters"][name]["Default"] == "true", name
        assert template["Parameters"][name]["AllowedValues"] == ["true", "false"], name
    attributes = template["Resources"]["LoadBalancer"]["Properties"]["LoadBalancerAttributes"]
    assert {
        "Key": "deletion_protection.enabled",
        "Value": {"Ref": "LoadBalancerDeletionProtection"},
    } in attributes


def _protections(peer_url: str, prefix: str, deployed: Deployed) -> tuple[set[bool], dict[str, str]]:
    """The deletion protection of the stack's tables (the set of their flags) and its load balancer's
    attributes, as the deployed AWS reports them."""
    dynamodb = client(peer_url, "dynamodb")
    tables = {
        dynamodb.describe_table(TableName=f"{prefix}{logical}")["Table"]["DeletionProtectionEnabled"]
        for logical in TABLE_SPECS
    }
    elb = client(peer_url, "elbv2")
    answer = elb.describe_load_balancer_attributes(LoadBalancerArn=deployed.resources["LoadBalancer"][1])
    return tables, {a["Key"]: a["Value"] for a in answer["Attributes"]}


def test_the_first_create_makes_unprotected_tables_a_stopped_fleet_and_no_autoscaling(
    first_create: Any,
) -> None:
    peer, prefix, deployed = first_create
    tables, load_balancer = _protections(peer.url, prefix, deployed)
    assert tables == {False}  # a rollback could delete them
    assert load_balancer["deletion_protection.enabled"] == "false"
    assert load_balancer["access_logs.s3.enabled"] == "false"
    # no count given: nothing starts before the secrets hold their values, and the API is not autoscaled up
    services = client(peer.url, "ecs").describe_services(
        cluster=deployed.outputs["ClusterName"], services=["engine", "api"]
    )["services"]
    assert {s["serviceName"]: s["desiredCount"] for s in services} == {"engine": 0, "api": 0}
    assert "ApiScalableTarget" not in deployed.resources and "ApiScalingPolicy" not in deployed.resources
    autoscaling = client(peer.url, "application-autoscaling")
    cluster = deployed.outputs["ClusterName"]
    targets = autoscaling.describe_scalable_targets(ServiceNamespace="ecs")["ScalableTargets"]
    assert not [t for t in targets if t["ResourceId"] == f"service/{cluster}/api"]
    parameters = load_template()["Parameters"]
    assert parameters["EngineCount"]["Default"] == parameters["ApiCount"]["Default"] == 0


def test_the_running_regions_tables_and_load_balancer_are_protected_and_its_access_logged(stack: Any) -> None:
    peer, prefix, deployed = stack
    tables, load_balancer = _protections(peer.url, prefix, deployed)
    assert tables == {True}
    assert load_balancer["deletion_protection.enabled"] == "true"
    logged = {k: v for k, v in load_balancer.items() if k.startswith("access_logs.")}
    assert logged == {
        "access_logs.s3.enabled": "true",
        "access_logs.s3.bucket": ACCESS_LOGS,
        "access_logs.s3.prefix": deployed.stack_name,
    }


# --- the secrets ---------------------------------------------------------------------------------------------


def test_the_stack_never_writes_a_secrets_value(stack: Any) -> None:
    """No GenerateSecretString or SecretString: nothing in the template is a value, so no edit of it and no
    update can overwrite the APNs key or the token put there; the stack makes both empty."""
    resources = load_template()["Resources"]
    for logical in ("ApnsKeySecret", "SportMonksTokenSecret"):
        props = resources[logical]["Properties"]
        assert "GenerateSecretString" not in props and "SecretString" not in props, logical
    peer, _, deployed = stack
    secrets = client(peer.url, "secretsmanager")
    for output in ("ApnsKeySecretArn", "SportMonksTokenSecretArn"):
        assert secrets.list_secret_version_ids(SecretId=deployed.outputs[output])["Versions"] == [], output


@pytest.mark.parametrize("which", ["stack", "first_create"])
def test_only_the_engines_execution_role_and_the_break_glass_role_may_read_the_apns_key(
    which: str, request: pytest.FixtureRequest
) -> None:
    peer, _, deployed = request.getfixturevalue(which)
    secrets = client(peer.url, "secretsmanager")
    policy = json.loads(
        secrets.get_resource_policy(SecretId=deployed.outputs["ApnsKeySecretArn"])["ResourcePolicy"]
    )
    (statement,) = policy["Statement"]
    assert statement["Effect"] == "Deny" and statement["Principal"] == "*"
    assert statement["Action"] == "secretsmanager:GetSecretValue"
    (allowed,) = statement["Condition"]["ArnNotEquals"].values()
    execution_role = client(peer.url, "iam").get_role(RoleName=deployed.resources["EngineExecutionRole"][1])
    engine = execution_role["Role"]["Arn"]
    assert (set(allowed) if isinstance(allowed, list) else {allowed}) == (
        {engine, BREAK_GLASS} if which == "stack" else {engine}
    )
    assert list(statement["Condition"]) == ["ArnNotEquals"]  # every other principal, whatever its own policy
    # and the execution role is the only role granted to read it at all
    readers = {
        logical
        for logical, documents in deployed.role_policies.items()
        for document in documents
        for st in document["Statement"]
        if "secretsmanager:GetSecretValue" in _actions(st)
        and deployed.outputs["ApnsKeySecretArn"] in st["Resource"]
    }
    assert readers == {"EngineExecutionRole"}


# --- autoscaling -------------------------------------------------------------------------------------------------


def test_the_api_autoscales_on_requests_per_task_between_its_count_and_its_maximum(stack: Any) -> None:
    peer, _, deployed = stack
    parameters = load_template()["Parameters"]
    for name in ("ApiCount", "ApiMaxCount", "ApiRequestsPerTarget"):
        assert parameters[name]["Type"] == "Number", name
    autoscaling = client(peer.url, "application-autoscaling")
    resource_id = f"service/{deployed.outputs['ClusterName']}/api"
    (target,) = [
        t
        for t in autoscaling.describe_scalable_targets(ServiceNamespace="ecs")["ScalableTargets"]
        if t["ResourceId"] == resource_id
    ]
    assert target["ScalableDimension"] == "ecs:service:DesiredCount"
    assert (target["MinCapacity"], target["MaxCapacity"]) == (2, parameters["ApiMaxCount"]["Default"])
    (policy,) = autoscaling.describe_scaling_policies(ServiceNamespace="ecs", ResourceId=resource_id)[
        "ScalingPolicies"
    ]
    tracking = policy["TargetTrackingScalingPolicyConfiguration"]
    assert policy["PolicyType"] == "TargetTrackingScaling"
    assert tracking["TargetValue"] == parameters["ApiRequestsPerTarget"]["Default"]
    metric = tracking["PredefinedMetricSpecification"]
    assert metric["PredefinedMetricType"] == "ALBRequestCountPerTarget"
    # the label is app/<lb>/<id>/targetgroup/<tg>/<id>: the load balancer's and the API target group's own
    lb, tg = deployed.resources["LoadBalancer"][1], deployed.resources["ApiTargetGroup"][1]
    assert metric["ResourceLabel"] == f"{lb.split(':loadbalancer/')[1]}/{tg.split(':', 5)[5]}"


# --- alarms ------------------------------------------------------------------------------------------------------

RUNBOOK = PROJECT_ROOT / "docs" / "runbook.md"


def _alarms(peer_url: str, deployed: Deployed) -> dict[str, dict[str, Any]]:
    names = [physical for kind, physical in deployed.resources.values() if kind == "AWS::CloudWatch::Alarm"]
    found = client(peer_url, "cloudwatch").describe_alarms(AlarmNames=names)["MetricAlarms"]
    return {a["AlarmName"]: a for a in found}


def _dimensions(alarm: dict[str, Any]) -> list[dict[str, dict[str, str]]]:
    """Each metric of an alarm as {metric name: {dimension: value}}."""
    metrics = [{alarm.get("MetricName"): {d["Name"]: d["Value"] for d in alarm.get("Dimensions", [])}}]
    for query in alarm.get("Metrics", []):
        if "MetricStat" in query:
            metric = query["MetricStat"]["Metric"]
            metrics.append({metric["MetricName"]: {d["Name"]: d["Value"] for d in metric["Dimensions"]}})
    return [m for m in metrics if None not in m]


def test_the_alarms_watch_the_fleet_the_load_balancer_and_every_table_and_go_to_the_encrypted_topic(
    stack: Any,
) -> None:
    peer, prefix, deployed = stack
    alarms = _alarms(peer.url, deployed)
    topic = deployed.outputs["AlarmTopicArn"]
    for name, alarm in alarms.items():
        assert alarm["AlarmActions"] == [topic] and alarm["OKActions"] == [topic], name
        assert alarm["TreatMissingData"] == "notBreaching", name
    sns = client(peer.url, "sns")
    key = deployed.resources["OperationsKey"][1]
    assert sns.get_topic_attributes(TopicArn=topic)["Attributes"]["KmsMasterKeyId"] == key
    (subscription,) = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert (subscription["Protocol"], subscription["Endpoint"]) == ("email", ON_CALL)

    watched = [
        (name, metric, dims)
        for name, a in alarms.items()
        for m in _dimensions(a)
        for metric, dims in m.items()
    ]
    cluster = deployed.outputs["ClusterName"]
    for service in ("engine", "api"):  # running below desired, from Container Insights, per service
        (name,) = {
            n
            for n, metric, dims in watched
            if metric == "RunningTaskCount" and dims.get("ServiceName") == service
        }
        assert {(m, d["ClusterName"]) for n, m, d in watched if n == name} == {
            ("RunningTaskCount", cluster),
            ("DesiredTaskCount", cluster),
        }
    lb = deployed.resources["LoadBalancer"][1].split(":loadbalancer/")[1]
    tg = deployed.resources["ApiTargetGroup"][1].split(":", 5)[5]
    load_balancer = {
        (m, d.get("LoadBalancer"), d.get("TargetGroup"))
        for _, m, d in watched
        if m.startswith(("HTTP", "UnHealthy"))
    }
    assert load_balancer == {
        ("HTTPCode_ELB_5XX_Count", lb, None),
        ("HTTPCode_Target_5XX_Count", lb, tg),
        ("UnHealthyHostCount", lb, tg),
    }
    throttled = {d["TableName"] for _, m, d in watched if m in ("ReadThrottleEvents", "WriteThrottleEvents")}
    assert throttled == {f"{prefix}{logical}" for logical in TABLE_SPECS}, "every table, by its name"
    queries = {
        q["Expression"]
        for a in alarms.values()
        for q in a.get("Metrics", [])
        if "SELECT" in q.get("Expression", "")
    }
    assert queries == {
        'SELECT SUM(ThrottledRequests) FROM SCHEMA("AWS/DynamoDB", Operation, TableName)',
        'SELECT SUM(SystemErrors) FROM SCHEMA("AWS/DynamoDB", Operation, TableName)',
    }
    # Container Insights is on (moto's ECS does not keep a cluster's settings: read it from the template)
    settings = load_template()["Resources"]["Cluster"]["Properties"]["ClusterSettings"]
    assert {"Name": "containerInsights", "Value": "enabled"} in settings


def test_every_alarm_names_its_runbook_section_and_the_runbook_has_it(stack: Any) -> None:
    peer, _, deployed = stack
    headings = {h.strip().lower() for h in re.findall(r"^## (.+)$", RUNBOOK.read_text(), flags=re.M)}
    for name, alarm in _alarms(peer.url, deployed).items():
        anchors = re.findall(r"Runbook: docs/runbook\.md#([a-z0-9-]+)", alarm["AlarmDescription"])
        assert len(anchors) == 1 and anchors[0] in headings, (name, alarm["AlarmDescription"])
