"""The region's CloudFormation template (``deploy/aws/sightscreen-region.yaml``) read as data and deployed into
the test AWS peer (``tests/harness/aws_peer.py``): what the template tests and the policy gate share.

``load_template`` reads the YAML with CloudFormation's short-form tags (``!Ref``, ``!Sub``, ``!GetAtt`` ...) as
their long forms. ``deploy`` makes what the template expects to find (a VPC with two subnets, an ACM
certificate), creates the stack with the given parameters and returns its outputs, resources and the inline
policies of its IAM roles as CloudFormation resolved them. Nothing here is shipped.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = PROJECT_ROOT / "deploy" / "aws" / "sightscreen-region.yaml"
REGION = "eu-west-1"
# the template's service roles, by the logical id of their ECS task role
TASK_ROLES = {"engine": "EngineTaskRole", "api": "ApiTaskRole"}


class _CfnLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short-form intrinsic functions."""


def _intrinsic(loader: _CfnLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = str(value).split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    return {name: value}


_CfnLoader.add_multi_constructor("!", _intrinsic)


def load_template(path: Path = TEMPLATE) -> dict[str, Any]:
    return dict(yaml.load(path.read_text(), Loader=_CfnLoader))  # noqa: S506 - a SafeLoader subclass


def default_parameters(prefix: str, network: dict[str, str]) -> dict[str, str]:
    """Parameters a test deployment gives: the network it made, and plausible values for the rest."""
    return {
        "TablePrefix": prefix,
        "ImageRepository": "sightscreen",
        "ImageTag": "1.0.0",
        "EngineCount": "2",
        "ApiCount": "2",
        "CognitoUserPoolId": f"{REGION}_AbCdEf123",
        "CognitoAppClientIds": "clientone,clienttwo",
        "ApnsTeamId": "TEAM123456",
        "ApnsTopic": "app.sightscreen.ios",
        "VpcId": network["vpc"],
        "LoadBalancerSubnetIds": network["subnets"],
        "ServiceSubnetIds": network["subnets"],
        "CertificateArn": network["certificate"],
    }


@dataclass
class Deployed:
    stack_name: str
    outputs: dict[str, str]
    resources: dict[str, tuple[str, str]]  # logical id -> (type, physical id)
    role_policies: dict[str, list[dict[str, Any]]]  # role logical id -> its inline policy documents


def client(url: str, service: str) -> Any:
    import boto3

    return boto3.client(
        service, endpoint_url=url, region_name=REGION, aws_access_key_id="deployer", aws_secret_access_key="x"
    )


def make_network(url: str) -> dict[str, str]:
    """What a region's stack is deployed into: a VPC, two subnets in two zones, a certificate for the API."""
    ec2 = client(url, "ec2")
    vpc = ec2.create_vpc(CidrBlock="10.40.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.40.{i}.0/24", AvailabilityZone=f"{REGION}{zone}")[
            "Subnet"
        ]["SubnetId"]
        for i, zone in enumerate("ab")
    ]
    cert = client(url, "acm").request_certificate(DomainName="api.sightscreen.test")["CertificateArn"]
    return {"vpc": vpc, "subnets": ",".join(subnets), "certificate": cert}


def deploy(url: str, stack_name: str, parameters: dict[str, str], *, template: Path = TEMPLATE) -> Deployed:
    """Create the stack in the peer at ``url`` and read back what it made."""
    cfn = client(url, "cloudformation")
    cfn.create_stack(
        StackName=stack_name,
        TemplateBody=template.read_text(),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
        Capabilities=["CAPABILITY_NAMED_IAM"],
    )
    deadline = time.monotonic() + 120
    while True:
        stack = cfn.describe_stacks(StackName=stack_name)["Stacks"][0]
        if not stack["StackStatus"].endswith("_IN_PROGRESS"):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"stack {stack_name} still {stack['StackStatus']}")
        time.sleep(0.2)
    if stack["StackStatus"] != "CREATE_COMPLETE":
        events = cfn.describe_stack_events(StackName=stack_name)["StackEvents"]
        raise RuntimeError(
            f"stack {stack_name}: {stack['StackStatus']}: {json.dumps(events, default=str)[:3000]}"
        )
    resources = {
        r["LogicalResourceId"]: (r["ResourceType"], r.get("PhysicalResourceId", ""))
        for r in cfn.list_stack_resources(StackName=stack_name)["StackResourceSummaries"]
    }
    iam = client(url, "iam")
    policies: dict[str, list[dict[str, Any]]] = {}
    for logical, (kind, physical) in resources.items():
        if kind != "AWS::IAM::Role":
            continue
        names = iam.list_role_policies(RoleName=physical)["PolicyNames"]
        policies[logical] = [
            _document(iam.get_role_policy(RoleName=physical, PolicyName=n)["PolicyDocument"]) for n in names
        ]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    return Deployed(stack_name, outputs, resources, policies)


def _document(document: Any) -> dict[str, Any]:
    """A policy document as GetRolePolicy returned it: JSON, URL-encoded JSON, or (moto keeps the inline
    policies of roles CloudFormation made as Python objects) their repr."""
    if not isinstance(document, str):
        return dict(document)
    import ast
    from urllib.parse import unquote

    text = unquote(document)
    try:
        return dict(json.loads(text))
    except ValueError:
        return dict(ast.literal_eval(text))
