"""EKS Pod Identity (``spec.irsa.mode: PodIdentity``): the nodes' role may ask for credentials.

The eks-pod-identity-agent on each node calls ``eks-auth:AssumeRoleForPodIdentity`` with
the node's role; without that permission every add-on's pod gets no credentials (and
aws-node has been seen to crash-loop without a word). AWS's ``AmazonEKSWorkerNodePolicy``
grants it (since 2023-11), and CAPA's default managed node group role has that policy.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

from botocore.exceptions import ClientError

from function.names import Partition
from function.policies import managed_policy_arn
from function_tools.aws.checks import Check, Status, absent

ACTION = "eks-auth:AssumeRoleForPodIdentity"
# The role clusterawsadm makes for CAPA's EKS managed node groups
# (AWSManagedMachinePool without spec.roleName).
DEFAULT_NODE_ROLE = "eks-nodegroup.cluster-api-provider-aws.sigs.k8s.io"
WORKER_NODE_POLICY = "policy/AmazonEKSWorkerNodePolicy"


def _documents(iam: Any, role: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, document) of every policy of ``role``: attached (default version), then inline."""
    for page in iam.get_paginator("list_attached_role_policies").paginate(RoleName=role):
        for attached in page.get("AttachedPolicies", []):
            arn = attached["PolicyArn"]
            version = iam.get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"]
            doc = iam.get_policy_version(PolicyArn=arn, VersionId=version)["PolicyVersion"]
            yield arn, _parsed(doc["Document"])
    for page in iam.get_paginator("list_role_policies").paginate(RoleName=role):
        for name in page.get("PolicyNames", []):
            doc = iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
            yield f"inline {name}", _parsed(doc)


def _parsed(doc: Any) -> dict[str, Any]:
    # boto3 decodes policy documents; some endpoints hand back the URL-encoded JSON.
    if isinstance(doc, str):
        return dict(json.loads(unquote(doc)))
    return dict(doc)


def _matches(statement: dict[str, Any]) -> bool:
    """Whether a statement's Action (not NotAction) covers ACTION on any resource."""
    actions = statement.get("Action", [])
    actions = [actions] if isinstance(actions, str) else actions
    return any(fnmatch.fnmatchcase(ACTION.lower(), str(a).lower()) for a in actions)


def check_node_role(iam: Any, role: str, partition: Partition) -> Check:
    """The nodes' role allows eks-auth:AssumeRoleForPodIdentity (and no policy of it denies it)."""
    name = f"pod-identity/node-role/{role}"
    fix = (
        f"aws iam attach-role-policy --role-name {role} --policy-arn "
        f"{managed_policy_arn(WORKER_NODE_POLICY, partition)} (or allow {ACTION} in a policy of "
        "the role); with another node role, pass it with --node-role"
    )
    try:
        iam.get_role(RoleName=role)
    except ClientError as err:
        if not absent(err, "NoSuchEntity"):
            raise
        msg = (
            f"the node role {role} does not exist: the eks-pod-identity-agent asks for the pods' "
            f"credentials with the node's role ({ACTION})"
        )
        where = "pass the role of the cluster's node groups (AWSManagedMachinePool spec.roleName)"
        return Check(name, Status.FAIL, msg, f"{where} with --node-role")
    allowed = denied = ""
    for source, doc in _documents(iam, role):
        statements = doc.get("Statement", [])
        for st in [statements] if isinstance(statements, dict) else statements:
            if not _matches(st):
                continue
            if st.get("Effect") == "Deny":
                denied = denied or source
            elif st.get("Effect") == "Allow":
                allowed = allowed or source
    if denied:
        msg = f"{source_phrase(denied)} of the node role {role} denies {ACTION}"
        return Check(name, Status.FAIL, msg, f"remove the Deny of {ACTION} from {denied}")
    if not allowed:
        msg = (
            f"no policy of the node role {role} allows {ACTION}: the eks-pod-identity-agent "
            "cannot get the add-ons' credentials, and their pods run without them"
        )
        return Check(name, Status.FAIL, msg, fix)
    msg = f"{source_phrase(allowed)} of the node role {role} allows {ACTION}"
    return Check(name, Status.PASS, msg)


def source_phrase(source: str) -> str:
    """A policy's ARN or ``inline <name>``, as a sentence starts with it."""
    return source if source.startswith("inline ") else f"policy {source}"
