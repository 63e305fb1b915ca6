"""The test suite's AWS on loopback: moto's server, single-threaded, with a recording layer and the few
CloudFormation properties moto leaves out.

What it adds to the server ``daemon/store/local.py`` runs (the same moto WSGI app, ``threaded=False``, the same
3-s cut-off of a silent client):

- **Recording** (``--record FILE``): every DynamoDB request signed with one of the service roles' access keys
  (``tests/harness/dynamodb_iam.py``: the end-to-end rigs run the engine and the API with them), or sent to
  an endpoint that names the role in its path (the fault rig's in-process daemon), is noted as
  the IAM permissions it needs: one JSON line per distinct (role, action, table, index), appended as it is
  first seen. The policy check (``tests/deploy/aws_policy_gate.py``) compares the lines of a whole run with the
  template's role policies.
- **CloudFormation as AWS does it** where moto's ``AWS::DynamoDB::Table`` drops properties: after moto
  creates a table from a template, its ``TimeToLiveSpecification`` and ``PointInTimeRecoverySpecification``
  are applied (the UpdateTimeToLive and UpdateContinuousBackups calls CloudFormation makes), and its
  ``SSESpecification`` is read with CloudFormation's ``SSEEnabled`` (moto expects CreateTable's ``Enabled``); and
  ``AWS::SecretsManager::Secret`` and ``AWS::APS::Workspace``, which moto's CloudFormation does not know, are
  created in moto's own Secrets Manager and Prometheus backends, with the ``Ref`` and ``GetAtt`` values AWS
  documents. Without these the region's template could not be deployed here at all, and
  ``sightscreen tables check`` would report every TTL as disabled.

- **Metering** (``--meter FILE``): every DynamoDB request of a service role as the read and write request
  units on-demand DynamoDB would bill it (``Meter``; ``bench/aws_cost.py``).

``AwsPeer`` starts it as a child process (it dies with its parent) and reads the port it bound from its first
line of output. Nothing here is shipped.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.store.local import MotoServer
from tests.harness.peer_priority import ahead_of_the_rig

PROJECT_ROOT = Path(__file__).resolve().parents[2]
_MODELS: list[type] = []


class Recorder:
    """WSGI layer: notes each role's DynamoDB permissions, then hands the request to moto unchanged."""

    def __init__(self, app: Any, path: Path) -> None:
        self.app = app
        self.path = path
        self.seen: set[tuple[str, Any]] = set()
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        from tests.harness.dynamodb_iam import ROLE_ACCESS_KEYS, ROLE_PATH, required_permissions, role_of

        target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
        role = role_of(str(environ.get("HTTP_AUTHORIZATION", "")))
        path = str(environ.get("PATH_INFO", ""))
        if path.startswith(ROLE_PATH):  # an in-process daemon's endpoint names its role (role_endpoint)
            named, _, rest = path[len(ROLE_PATH) :].partition("/")
            environ["PATH_INFO"] = "/" + rest
            role = role or (named if named in ROLE_ACCESS_KEYS else None)
        if role is not None and target.startswith("DynamoDB_"):
            body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            environ["wsgi.input"] = io.BytesIO(body)  # moto reads the body again
            try:
                request = json.loads(body or b"{}")
            except ValueError:
                request = {}
            for permission in required_permissions(target.split(".", 1)[1], request):
                self._note(role, permission)
        return self.app(environ, start_response)

    def _note(self, role: str, permission: Any) -> None:
        with self.lock:
            if (role, permission) in self.seen:
                return
            self.seen.add((role, permission))
            line = {"role": role, "action": permission.action, "table": permission.table}
            if permission.index is not None:
                line["index"] = permission.index
            with self.path.open(
                "a"
            ) as out:  # one short line per write: whole lines even beside other servers
                out.write(json.dumps(line) + "\n")


@dataclass
class _Write:
    """One item a write request writes (or checks): its table, key, kind (Put, Update, Delete, ConditionCheck),
    the item a Put sends, its unit factor (2 in a transaction) and the stored item before and after it, each as
    (size in bytes, the item's scalar attributes) or None where there is none."""

    table: str
    key: dict[str, Any]
    kind: str
    sent: dict[str, Any] | None
    factor: int
    before: tuple[int, dict[str, Any]] | None = None
    after: tuple[int, dict[str, Any]] | None = None


class Meter:
    """WSGI layer: one JSON line per DynamoDB request of a service role and table, and one per global secondary
    index the request wrote, with the request units DynamoDB's on-demand mode would bill it
    (``bench/aws_cost.py`` adds them up).

    Units follow DynamoDB's rules on item sizes as moto computes them:

    - a write is one unit per KB (started) of the larger of the item before and after it: a PutItem's stored
      item and the item sent, an UpdateItem's stored item before and after, a DeleteItem's (and a transaction's
      ConditionCheck's) stored item; twice that in a transaction. A refused conditional write still costs its
      units, as on DynamoDB.
    - a write that succeeds also writes each global secondary index whose key attributes the item carries,
      before or after (every index here projects ALL, so an index entry is the item's size): one write of the
      larger of before and after while the index key stays, a delete of the old entry and a put of the new one
      when the index key changes, one put when the item gains the keys and one delete when it loses them; twice
      that in a transaction. Each index's units are their own line (``index``).
    - a read is one unit per 4 KB read (summed over a Query's or Scan's page, per item otherwise), half that
      when eventually consistent, twice in a transaction."""

    WRITES = ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems")

    def __init__(self, app: Any, path: Path) -> None:
        self.app = app
        self.path = path
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        from tests.harness.dynamodb_iam import logical_table, role_of

        target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
        role = role_of(str(environ.get("HTTP_AUTHORIZATION", "")))
        if role is None or not target.startswith("DynamoDB_"):
            return self.app(environ, start_response)
        operation = target.split(".", 1)[1]
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        environ["wsgi.input"] = io.BytesIO(body)
        request = json.loads(body or b"{}")
        # the credential scope names the region: Credential=KEY/DATE/REGION/dynamodb/aws4_request
        scope = str(environ.get("HTTP_AUTHORIZATION", "")).split("Credential=", 1)[-1].split("/")
        region = scope[2] if len(scope) > 2 else "us-east-1"
        writes = self._writes(operation, request, region)
        for write in writes:
            write.before = self._stored(region, write.table, write.key)
        answer = b"".join(self.app(environ, start_response))
        try:
            response = json.loads(answer or b"{}")
        except ValueError:
            response = {}
        done = "__type" not in response  # refused (a condition, a cancelled transaction): nothing was written
        for write in writes:
            if not done or write.kind == "ConditionCheck":
                write.after = write.before
            elif write.kind == "Put":
                write.after = (self._size(write.sent or {}), self._scalars(write.sent or {}))
            elif write.kind == "Update":
                write.after = self._stored(region, write.table, write.key)
        units = self._units(operation, request, response, writes, done, region)
        with self.lock, self.path.open("a") as out:
            for (physical, index), (rru, wru) in units.items():
                line: dict[str, Any] = {
                    "role": role,
                    "op": operation,
                    "table": logical_table(physical) or physical,
                }
                if index is not None:
                    line["index"] = index
                out.write(json.dumps({**line, "rru": rru, "wru": wru}) + "\n")
        return [answer]

    @staticmethod
    def _size(item: dict[str, Any]) -> int:
        from moto.dynamodb.models.dynamo_type import DynamoType
        from moto.dynamodb.models.utilities import bytesize

        return sum(bytesize(name) + DynamoType(value).size() for name, value in item.items())

    @staticmethod
    def _scalars(item: dict[str, Any]) -> dict[str, Any]:
        """An item's (DynamoDB JSON) string, number and binary attributes: what an index key can be."""
        return {
            name: (kind, value)
            for name, typed in item.items()
            for kind, value in typed.items()
            if kind in ("S", "N", "B")
        }

    @staticmethod
    def _table(region: str, name: str) -> Any:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        try:
            return dynamodb_backends[DEFAULT_ACCOUNT_ID][region].get_table(name)
        except Exception:  # noqa: BLE001 - no such table: nothing to meter
            return None

    def _stored(self, region: str, table: str, key: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """The stored item under ``key`` as (size, scalar attributes), or None."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        try:
            item = dynamodb_backends[DEFAULT_ACCOUNT_ID][region].get_item(table, key)
        except Exception:  # noqa: BLE001 - no such table or key: nothing stored
            return None
        if item is None:
            return None
        scalars = {n: (v.type, v.value) for n, v in item.attrs.items() if v.type in ("S", "N", "B")}
        return item.size(), scalars

    def _writes(self, operation: str, request: dict[str, Any], region: str) -> list[_Write]:
        """The items a write request writes or checks, each with its key."""

        def keyed(table: str, item: dict[str, Any]) -> dict[str, Any]:
            found = self._table(region, table)
            names = [found.hash_key_attr, found.range_key_attr] if found is not None else []
            return {n: item[n] for n in names if n and n in item}

        if operation == "PutItem":
            item = request.get("Item") or {}
            return [_Write(request["TableName"], keyed(request["TableName"], item), "Put", item, 1)]
        if operation in ("UpdateItem", "DeleteItem"):
            return [_Write(request["TableName"], request["Key"], operation[:-4], None, 1)]
        out: list[_Write] = []
        if operation == "BatchWriteItem":
            for table, writes in (request.get("RequestItems") or {}).items():
                for w in writes:
                    if "PutRequest" in w:
                        item = w["PutRequest"]["Item"]
                        out.append(_Write(table, keyed(table, item), "Put", item, 1))
                    else:
                        out.append(_Write(table, w["DeleteRequest"]["Key"], "Delete", None, 1))
        elif operation == "TransactWriteItems":
            for entry in request.get("TransactItems") or []:
                for kind, r in entry.items():
                    if kind == "Put":
                        out.append(
                            _Write(r["TableName"], keyed(r["TableName"], r["Item"]), "Put", r["Item"], 2)
                        )
                    else:
                        out.append(_Write(r["TableName"], r["Key"], kind, None, 2))
        return out

    def _units(
        self,
        operation: str,
        request: dict[str, Any],
        response: dict[str, Any],
        writes: list[_Write],
        done: bool,
        region: str,
    ) -> dict[tuple[str, str | None], tuple[float, float]]:
        import math

        read = 0.5 if not request.get("ConsistentRead") else 1.0
        out: dict[tuple[str, str | None], tuple[float, float]] = {}

        def add(table: str, rru: float = 0.0, wru: float = 0.0, index: str | None = None) -> None:
            r, w = out.get((table, index), (0.0, 0.0))
            out[(table, index)] = (r + rru, w + wru)

        def kb(size: int) -> int:
            return max(1, math.ceil(size / 1024))

        if operation in ("GetItem",):
            add(
                request["TableName"],
                rru=read * max(1, math.ceil(self._size(response.get("Item") or {}) / 4096)),
            )
        elif operation in ("Query", "Scan"):
            total = sum(self._size(i) for i in response.get("Items") or [])
            add(request["TableName"], rru=read * max(1, math.ceil(total / 4096)))
        elif operation == "BatchGetItem":
            # Each key read is billed as its own GetItem: a key with no item still costs the minimum, and
            # the table's ConsistentRead doubles it; keys left unprocessed were not read.
            found = response.get("Responses") or {}
            unprocessed = response.get("UnprocessedKeys") or {}
            for table, asked in (request.get("RequestItems") or {}).items():
                per = 1.0 if asked.get("ConsistentRead") else 0.5
                items = found.get(table) or []
                read_keys = len(asked.get("Keys") or []) - len(
                    (unprocessed.get(table) or {}).get("Keys") or []
                )
                units = sum(per * max(1, math.ceil(self._size(i) / 4096)) for i in items)
                add(table, rru=units + per * max(0, read_keys - len(items)))
        elif writes:
            for write in writes:
                sizes = [s[0] for s in (write.before, write.after) if s is not None]
                if write.kind == "Put":
                    sizes.append(self._size(write.sent or {}))  # billed on the item sent, refused or not
                add(write.table, wru=write.factor * kb(max(sizes, default=0)))
                if done and write.kind != "ConditionCheck":
                    for index, units in self._index_writes(region, write):
                        add(write.table, wru=write.factor * units, index=index)
        elif "TableName" in request:
            add(request["TableName"])
        return out

    def _index_writes(self, region: str, write: _Write) -> list[tuple[str, int]]:
        """The write units of each global secondary index a successful write changed (see the class)."""
        import math

        def kb(size: int) -> int:
            return max(1, math.ceil(size / 1024))

        def entry(state: tuple[int, dict[str, Any]] | None, names: list[str]) -> tuple[Any, ...] | None:
            if state is None or any(n not in state[1] for n in names):
                return None  # no item, or the item lacks the index's key: not in the index
            return tuple(state[1][n] for n in names)

        table = self._table(region, write.table)
        out: list[tuple[str, int]] = []
        for index in getattr(table, "global_indexes", None) or []:
            names = [k["AttributeName"] for k in index.schema]
            old, new = entry(write.before, names), entry(write.after, names)
            if old is None and new is None:
                continue
            before = write.before[0] if write.before is not None else 0
            after = write.after[0] if write.after is not None else 0
            if old is not None and new is not None:
                units = kb(max(before, after)) if old == new else kb(before) + kb(after)
            else:
                units = kb(before) if new is None else kb(after)
            out.append((index.name, units))
        return out


def complete_cloudformation() -> None:
    """Teach moto's CloudFormation the properties and resource types the region's template uses that it lacks."""
    from moto.amp.models import amp_backends
    from moto.core.common_models import CloudFormationModel
    from moto.dynamodb.models import dynamodb_backends
    from moto.dynamodb.models.table import Table
    from moto.secretsmanager.models import secretsmanager_backends

    create_table = Table.create_from_cloudformation_json.__func__  # type: ignore[attr-defined]

    def create_table_as_aws(
        cls: Any,
        resource_name: str,
        cloudformation_json: dict[str, Any],
        account_id: str,
        region_name: str,
        **kw: Any,
    ) -> Any:
        props = cloudformation_json["Properties"]
        protected = props.get("DeletionProtectionEnabled")
        if isinstance(protected, str):  # a parameter's "true"/"false": CloudFormation reads it as the Boolean
            props["DeletionProtectionEnabled"] = protected.lower() == "true"
        sse = props.get("SSESpecification")
        if sse is not None:  # CloudFormation says SSEEnabled where CreateTable (and moto) says Enabled
            props["SSESpecification"] = {
                "Enabled": sse.get("SSEEnabled", False),
                **{k: v for k, v in sse.items() if k in ("SSEType", "KMSMasterKeyId")},
            }
        table = create_table(cls, resource_name, cloudformation_json, account_id, region_name, **kw)
        backend = dynamodb_backends[account_id][region_name]
        if "TimeToLiveSpecification" in props:
            backend.update_time_to_live(table.name, props["TimeToLiveSpecification"])
        if "PointInTimeRecoverySpecification" in props:
            backend.update_continuous_backups(table.name, props["PointInTimeRecoverySpecification"])
        return table

    Table.create_from_cloudformation_json = classmethod(create_table_as_aws)  # type: ignore[method-assign,assignment]

    class Secret(CloudFormationModel):
        __module__ = (
            "moto.secretsmanager.models"  # moto's model registry names a model's service by its module
        )

        def __init__(self, arn: str, name: str) -> None:
            self.arn, self.name = arn, name

        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::SecretsManager::Secret"

        @staticmethod
        def cloudformation_name_type() -> str:
            return "Name"

        @classmethod
        def has_cfn_attr(cls, attr: str) -> bool:
            return attr == "Id"

        def get_cfn_attribute(self, attribute_name: str) -> Any:
            return self.arn

        @property
        def physical_resource_id(self) -> str:
            return self.arn  # Ref: the secret's ARN

        @classmethod
        def create_from_cloudformation_json(
            cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kw: Any
        ) -> Secret:
            props = cloudformation_json["Properties"]
            generated = props.get("GenerateSecretString")
            value = props.get("SecretString") or (os.urandom(16).hex() if generated is not None else None)
            backend = secretsmanager_backends[account_id][region_name]
            answer = json.loads(
                backend.create_secret(
                    name=props.get("Name") or resource_name,
                    secret_string=value,
                    secret_binary=None,
                    description=props.get("Description"),
                    tags=props.get("Tags"),
                    kms_key_id=props.get("KmsKeyId"),
                    client_request_token=None,
                    replica_regions=[],
                    force_overwrite=False,
                )
            )
            return cls(answer["ARN"], answer["Name"])

    class Workspace(CloudFormationModel):
        __module__ = "moto.amp.models"

        def __init__(self, workspace: Any) -> None:
            self.workspace = workspace

        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::APS::Workspace"

        @staticmethod
        def cloudformation_name_type() -> str:
            return "Alias"

        @classmethod
        def has_cfn_attr(cls, attr: str) -> bool:
            return attr in ("Arn", "PrometheusEndpoint", "WorkspaceId")

        def get_cfn_attribute(self, attribute_name: str) -> Any:
            return {
                "Arn": self.workspace.arn,
                "PrometheusEndpoint": self.workspace.endpoint,
                "WorkspaceId": self.workspace.workspace_id,
            }[attribute_name]

        @property
        def physical_resource_id(self) -> str:
            return str(self.workspace.arn)  # Ref: the workspace's ARN

        @classmethod
        def create_from_cloudformation_json(
            cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kw: Any
        ) -> Workspace:
            props = cloudformation_json["Properties"]
            tags = {t["Key"]: t["Value"] for t in props.get("Tags") or []}
            return cls(amp_backends[account_id][region_name].create_workspace(props.get("Alias", ""), tags))

    from moto.cloudformation import parsing

    # moto finds models as CloudFormationModel's subclasses, which it holds weakly: keep ours alive
    _MODELS.extend([Secret, Workspace, *_operations_models()])
    parsing.get_model_map.cache_clear()


def _operations_models() -> list[type]:
    """The region template's operations resources moto's CloudFormation does not know, made in moto's own
    backends with the ``Ref`` values AWS documents: ``AWS::CloudWatch::Alarm`` (the alarm's name),
    ``AWS::ApplicationAutoScaling::ScalableTarget`` and ``ScalingPolicy``, ``AWS::SecretsManager::ResourcePolicy``
    (the secret's ARN); and the target group's ``TargetGroupFullName`` attribute (what CloudWatch's dimensions
    and the scaling policy's resource label name it by), the load balancer's ``LoadBalancerFullName``, which moto
    leaves unimplemented, and its ``LoadBalancerAttributes``, which moto's CloudFormation leaves out."""
    from moto.applicationautoscaling.models import applicationautoscaling_backends
    from moto.cloudwatch.models import Dimension, Metric, MetricDataQuery, MetricStat, cloudwatch_backends
    from moto.core.common_models import CloudFormationModel
    from moto.elbv2.models import FakeLoadBalancer, FakeTargetGroup, elbv2_backends
    from moto.secretsmanager.models import secretsmanager_backends

    def target_group_attribute(self: Any, attribute_name: str) -> Any:
        if attribute_name == "TargetGroupFullName":  # targetgroup/<name>/<id>, the ARN's resource part
            return str(self.arn).split(":", 5)[5]
        from moto.cloudformation.exceptions import UnformattedGetAttTemplateException

        raise UnformattedGetAttTemplateException()

    FakeTargetGroup.has_cfn_attr = classmethod(lambda cls, attr: attr == "TargetGroupFullName")  # type: ignore[assignment]
    FakeTargetGroup.get_cfn_attribute = target_group_attribute  # type: ignore[attr-defined]

    def load_balancer_attribute(self: Any, attribute_name: str) -> Any:
        if attribute_name == "LoadBalancerFullName":  # app/<name>/<id>, the ARN's resource part
            return str(self.arn).split(":loadbalancer/", 1)[1]
        return load_balancer_attributes(self, attribute_name)

    load_balancer_attributes = FakeLoadBalancer.get_cfn_attribute
    FakeLoadBalancer.get_cfn_attribute = load_balancer_attribute  # type: ignore[method-assign]

    create_load_balancer = FakeLoadBalancer.create_from_cloudformation_json.__func__  # type: ignore[attr-defined]

    def create_load_balancer_as_aws(
        cls: Any, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kw: Any
    ) -> Any:
        # moto leaves LoadBalancerAttributes out; CloudFormation sets them (ModifyLoadBalancerAttributes)
        balancer = create_load_balancer(
            cls, resource_name, cloudformation_json, account_id, region_name, **kw
        )
        attributes = cloudformation_json["Properties"].get("LoadBalancerAttributes") or []
        elbv2_backends[account_id][region_name].modify_load_balancer_attributes(
            balancer.arn, {a["Key"]: a["Value"] for a in attributes if a}
        )
        return balancer

    FakeLoadBalancer.create_from_cloudformation_json = classmethod(create_load_balancer_as_aws)  # type: ignore[method-assign,assignment]

    class Alarm(CloudFormationModel):
        __module__ = "moto.cloudwatch.models"

        def __init__(self, name: str) -> None:
            self.name = name

        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::CloudWatch::Alarm"

        @staticmethod
        def cloudformation_name_type() -> str:
            return "AlarmName"

        @property
        def physical_resource_id(self) -> str:
            return self.name  # Ref: the alarm's name

        @classmethod
        def create_from_cloudformation_json(
            cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kw: Any
        ) -> Alarm:
            props = cloudformation_json["Properties"]
            queries = []
            for query in props.get("Metrics") or []:
                stat = query.get("MetricStat")
                metric_stat = None
                if stat is not None:
                    metric = stat["Metric"]
                    dimensions = [Dimension(d["Name"], d["Value"]) for d in metric.get("Dimensions") or []]
                    metric_stat = MetricStat(
                        Metric(metric["MetricName"], metric["Namespace"], dimensions),
                        stat["Period"],
                        stat["Stat"],
                        stat.get("Unit"),
                    )
                queries.append(
                    MetricDataQuery(
                        query["Id"],
                        query.get("Label"),
                        query.get("Period"),
                        query.get("ReturnData", True),
                        query.get("Expression"),
                        metric_stat,
                    )
                )
            name = props.get("AlarmName") or resource_name
            cloudwatch_backends[account_id][region_name].put_metric_alarm(
                name=name,
                namespace=props.get("Namespace"),
                metric_name=props.get("MetricName"),
                comparison_operator=props["ComparisonOperator"],
                evaluation_periods=int(props["EvaluationPeriods"]),
                period=props.get("Period"),
                threshold=float(props["Threshold"]),
                statistic=props.get("Statistic"),
                description=props.get("AlarmDescription"),
                dimensions=props.get("Dimensions") or [],
                alarm_actions=props.get("AlarmActions") or [],
                metric_data_queries=queries or None,
                datapoints_to_alarm=props.get("DatapointsToAlarm"),
                ok_actions=props.get("OKActions") or [],
                treat_missing_data=props.get("TreatMissingData"),
            )
            return cls(name)

    class ScalableTarget(CloudFormationModel):
        __module__ = "moto.applicationautoscaling.models"

        def __init__(self, target_id: str) -> None:
            self.target_id = target_id

        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::ApplicationAutoScaling::ScalableTarget"

        @staticmethod
        def cloudformation_name_type() -> str:
            return ""

        @property
        def physical_resource_id(self) -> str:
            return self.target_id  # Ref: resource id|scalable dimension|service namespace

        @classmethod
        def create_from_cloudformation_json(
            cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kw: Any
        ) -> ScalableTarget:
            props = cloudformation_json["Properties"]
            applicationautoscaling_backends[account_id][region_name].register_scalable_target(
                props["ServiceNamespace"],
                props["ResourceId"],
                props["ScalableDimension"],
                int(props["MinCapacity"]),
                int(props["MaxCapacity"]),
                props.get("RoleARN", ""),
                props.get("SuspendedState", {}),
            )
            return cls("|".join([props["ResourceId"], props["ScalableDimension"], props["ServiceNamespace"]]))

    class ScalingPolicy(CloudFormationModel):
        __module__ = "moto.applicationautoscaling.models"

        def __init__(self, arn: str) -> None:
            self.arn = arn

        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::ApplicationAutoScaling::ScalingPolicy"

        @staticmethod
        def cloudformation_name_type() -> str:
            return "PolicyName"

        @property
        def physical_resource_id(self) -> str:
            return self.arn  # Ref: the policy's ARN

        @classmethod
        def create_from_cloudformation_json(
            cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kw: Any
        ) -> ScalingPolicy:
            props = cloudformation_json["Properties"]
            resource_id, dimension, namespace = str(props["ScalingTargetId"]).split("|")
            policy = applicationautoscaling_backends[account_id][region_name].put_scaling_policy(
                policy_name=props["PolicyName"],
                service_namespace=namespace,
                resource_id=resource_id,
                scalable_dimension=dimension,
                policy_body=props.get("TargetTrackingScalingPolicyConfiguration")
                or props.get("StepScalingPolicyConfiguration")
                or {},
                policy_type=props["PolicyType"],
            )
            return cls(policy.policy_arn)

    class SecretResourcePolicy(CloudFormationModel):
        __module__ = "moto.secretsmanager.models"

        def __init__(self, secret_arn: str) -> None:
            self.secret_arn = secret_arn

        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::SecretsManager::ResourcePolicy"

        @staticmethod
        def cloudformation_name_type() -> str:
            return ""

        @property
        def physical_resource_id(self) -> str:
            return self.secret_arn  # Ref: the secret's ARN

        @classmethod
        def create_from_cloudformation_json(
            cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kw: Any
        ) -> SecretResourcePolicy:
            props = cloudformation_json["Properties"]
            policy = props["ResourcePolicy"]
            arn, _ = secretsmanager_backends[account_id][region_name].put_resource_policy(
                props["SecretId"], policy if isinstance(policy, str) else json.dumps(policy)
            )
            return cls(arn)

    return [Alarm, ScalableTarget, ScalingPolicy, SecretResourcePolicy]


def main() -> None:
    parser = argparse.ArgumentParser(
        description="moto on loopback, single-threaded, recording the roles' calls"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--record", type=Path, default=None, help="append the roles' permissions here")
    parser.add_argument("--meter", type=Path, default=None, help="append each role request's units here")
    args = parser.parse_args()
    ahead_of_the_rig()

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from moto.server import MotoRequestHandler
    from werkzeug.serving import make_server

    class Quiet(MotoRequestHandler):
        timeout = 3  # one thread serves everyone: cut off a client silent for 3 s mid-request

        def log_request(self, *a: Any, **k: Any) -> None:
            pass

    complete_cloudformation()
    app: Any = DomainDispatcherApplication(create_backend_app)
    if args.meter is not None:
        app = Meter(app, args.meter)
    if args.record is not None:
        app = Recorder(app, args.record)
    server = make_server(args.host, 0, app, threaded=False, request_handler=Quiet)
    print(server.server_port, flush=True)
    server.serve_forever()


@dataclass
class AwsPeer(MotoServer):
    """The server above as a child process: ``start()`` returns once it listens; ``stop()``, ``url`` and the
    context manager are ``MotoServer``'s."""

    record: Path | None = None
    meter: Path | None = None

    def start(self, timeout: float = 30.0) -> AwsPeer:
        from daemon.store.local import die_with_parent

        command = [sys.executable, "-m", "tests.harness.aws_peer", "--host", self.host]
        if self.record is not None:
            command += ["--record", str(self.record)]
        if self.meter is not None:
            command += ["--meter", str(self.meter)]
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")])
        )
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=die_with_parent,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # the port, once bound; nothing if it failed to start
        if not line.strip().isdigit():
            self.stop()
            raise RuntimeError(f"the AWS peer did not start (said {line!r})")
        self.port = int(line)
        return self

    def __enter__(self) -> AwsPeer:
        return self.start()


if __name__ == "__main__":
    main()
