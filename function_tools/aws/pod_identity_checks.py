"""EKS Pod Identity (``spec.irsa.mode: PodIdentity``): what stands between the add-ons and it.

- The nodes' role may ask for credentials: the eks-pod-identity-agent on each node calls
  ``eks-auth:AssumeRoleForPodIdentity`` with the node's role; without that permission every
  add-on's pod gets no credentials (and aws-node has been seen to crash-loop without a word).
  AWS's ``AmazonEKSWorkerNodePolicy`` grants it (since 2023-11), and CAPA's default managed
  node group role has that policy.
- The cluster's associations: EKS takes up to 5,000 per cluster (a documented limit that
  Service Quotas does not carry), one per service account; the function adds one per add-on
  with a role.
- Leftovers: a ServiceAccount still annotated ``eks.amazonaws.com/role-arn`` keeps IRSA in
  use, since the SDKs' credential chain tries web identity before the container provider.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from botocore.exceptions import ClientError

from function.cluster import EKS_NODEGROUP_ROLE, NodeIdentity
from function.names import Partition
from function.policies import managed_policy_arn
from function.spec_base import IRSAMode
from function_tools.aws.checks import Check, Status, absent, code, denied, plural

ACTION = "eks-auth:AssumeRoleForPodIdentity"
# The role clusterawsadm makes for CAPA's EKS managed node groups
# (AWSManagedMachinePool without spec.roleName): checked when nothing names another.
DEFAULT_NODE_ROLE = EKS_NODEGROUP_ROLE
ASSUMED = (
    "CAPA's default for EKS managed node groups: no node group of the cluster was given; pass "
    "its MachinePools or MachineDeployments and their AWS objects with --required, or "
    "--node-role"
)
WORKER_NODE_POLICY = "policy/AmazonEKSWorkerNodePolicy"


def flags_outside_pod_identity(mode: IRSAMode, flags: Mapping[str, bool]) -> str | None:
    """Why preflight refuses the Pod Identity flags given (``flags``: name -> given), or None.

    They are read only with ``spec.irsa.mode: PodIdentity``: elsewhere nothing would read
    them, and a flag silently ignored reads as a check that passed.
    """
    given = [name for name, on in flags.items() if on]
    if mode is IRSAMode.POD_IDENTITY or not given:
        return None
    return (
        f"{' and '.join(given)} {'is' if len(given) == 1 else 'are'} read only with "
        f"spec.irsa.mode PodIdentity (this XR's is {mode.value}): leave "
        f"{'it' if len(given) == 1 else 'them'} out"
    )


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


def node_roles(
    iam: Any, identities: Sequence[NodeIdentity]
) -> tuple[dict[str, list[str]], list[Check]]:
    """The roles the node groups run with (role -> what uses it), and what stands in the way.

    An AWSManagedMachinePool names its role; self-managed nodes an instance profile, whose
    role IAM says.
    """
    roles: dict[str, list[str]] = {}
    problems = []
    for node in identities:
        if node.role:
            roles.setdefault(node.role, []).append(node.source)
            continue
        name = f"pod-identity/node-role/{node.source}"
        if not node.instance_profile:
            msg = f"{node.source} names no instance profile: its nodes have no role to ask with"
            fix = "give it CAPA's nodes.cluster-api-provider-aws.sigs.k8s.io (clusterawsadm's)"
            problems.append(Check(name, Status.FAIL, msg, fix))
            continue
        profile = node.instance_profile.rsplit("/", 1)[-1]  # a name, or an ARN's last part
        try:
            held = iam.get_instance_profile(InstanceProfileName=profile)["InstanceProfile"]
        except ClientError as err:
            if not absent(err, "NoSuchEntity"):
                raise
            msg = f"the instance profile {profile} of {node.source} does not exist"
            problems.append(Check(name, Status.FAIL, msg, "create it, or name another"))
            continue
        if not held.get("Roles"):
            msg = f"the instance profile {profile} of {node.source} holds no role"
            fix = f"aws iam add-role-to-instance-profile --instance-profile-name {profile} ..."
            problems.append(Check(name, Status.FAIL, msg, fix))
        for role in held.get("Roles", []):
            used = f"{node.source} (instance profile {profile})"
            roles.setdefault(str(role["RoleName"]), []).append(used)
    return roles, problems


def check_node_role(iam: Any, role: str, partition: Partition, used_by: str = "") -> Check:
    """The nodes' role allows eks-auth:AssumeRoleForPodIdentity (and no policy of it denies it).

    ``used_by``: what runs with it, said after each message.
    """
    check = _node_role(iam, role, partition)
    if not used_by:
        return check
    return dataclasses.replace(check, message=f"{check.message} (used by {used_by})")


def _node_role(iam: Any, role: str, partition: Partition) -> Check:
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
        where = (
            "create it, or pass the cluster's node groups with --required (the roles their "
            "AWSManagedMachinePools and instance profiles name), or their role"
        )
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


# "Up to 5,000 EKS Pod Identity associations per cluster" (EKS user guide, pod-identities,
# Limits); the EKS service quotas page: adjusting it "is not supported in Service Quotas".
ASSOCIATIONS_PER_CLUSTER = 5000
ASSOCIATIONS_WARN_AT = 4500
ROLE_ARN_ANNOTATION = "eks.amazonaws.com/role-arn"
NO_CLUSTER = "ResourceNotFoundException"


@dataclass(frozen=True)
class Wanted:
    """An add-on's service account the function associates with the add-on's role."""

    addon: str
    namespace: str
    service_account: str
    role_name: str

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, service account), as EKS keys an association."""
        return (self.namespace, self.service_account)

    @property
    def path(self) -> str:
        """``namespace/name``, for messages."""
        return f"{self.namespace}/{self.service_account}"


def _could_not(name: str, operation: str, err: ClientError) -> Check:
    """A WARN for a call that failed for another reason than a missing cluster."""
    if denied(err):
        msg = f"could not check: eks:{operation} was denied ({code(err)})"
        return Check(name, Status.WARN, msg, f"allow eks:{operation} to the preflight identity")
    said = str(err.response.get("Error", {}).get("Message", "")).strip()
    status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
    # An endpoint that does not serve the operation (an emulator) answers with an HTML page.
    detail = f": {said.splitlines()[0]}" if said and not said.startswith("<") else ""
    msg = f"could not check: eks:{operation} answered {code(err)} (HTTP {status}){detail}"
    fix = f"against AWS, run it again; an emulator (--endpoint-url) may not serve eks:{operation}"
    return Check(name, Status.WARN, msg, fix)


def cluster_exists(eks: Any, cluster: str) -> tuple[bool | None, ClientError | None]:
    """Whether the EKS cluster exists (eks:DescribeCluster); None and the error when unknown."""
    try:
        eks.describe_cluster(name=cluster)
    except ClientError as err:
        if code(err) == NO_CLUSTER:
            return False, None
        return None, err
    return True, None


def check_associations(
    eks: Any, cluster: str, wanted: Sequence[Wanted], *, strict: bool
) -> tuple[Check, bool | None]:
    """The cluster's associations against the per-cluster limit, with the function's to come.

    An association for one of the add-ons' service accounts with another role stands in
    the way (EKS takes one per service account). Returns the check and whether the EKS
    cluster exists (None when that could not be found out).
    """
    name = f"pod-identity/associations/{cluster}"
    exists, err = cluster_exists(eks, cluster)
    if err is not None:
        return _could_not(name, "DescribeCluster", err), None
    if not exists:
        msg = (
            f"the EKS cluster {cluster} does not exist yet; the function adds {len(wanted)} "
            f"Pod Identity associations of the {ASSOCIATIONS_PER_CLUSTER} a cluster may have"
        )
        fix = "check the AWSManagedControlPlane: CAPA creates the EKS cluster first"
        # Before: CAPA has not made it yet, nothing to count. After: the associations need it.
        return Check(name, Status.FAIL if strict else Status.PASS, msg, fix), False
    by_key: dict[tuple[str, str], str] = {}
    count = 0
    roles: dict[tuple[str, str], str] = {}
    try:
        pages = eks.get_paginator("list_pod_identity_associations").paginate(clusterName=cluster)
        for page in pages:
            for a in page.get("associations", []):
                count += 1
                key = (str(a.get("namespace", "")), str(a.get("serviceAccount", "")))
                by_key[key] = str(a.get("associationId", ""))
        for w in wanted:
            if w.key in by_key:
                got = eks.describe_pod_identity_association(
                    clusterName=cluster, associationId=by_key[w.key]
                )["association"]
                roles[w.key] = str(got.get("roleArn", ""))
    except ClientError as err:
        return _could_not(name, str(getattr(err, "operation_name", "")), err), True
    return judge_associations(cluster, count, roles, wanted), True


def judge_associations(
    cluster: str, count: int, roles: Mapping[tuple[str, str], str], wanted: Sequence[Wanted]
) -> Check:
    """The cluster's ``count`` associations, ``roles`` those of the add-ons' service accounts.

    An add-on's service account associated with another role than the add-on's stands in
    the way; the others the function adds count against the per-cluster limit.
    """
    name = f"pod-identity/associations/{cluster}"
    conflicts = [
        f"{w.path} ({w.addon}) with {roles[w.key]}"
        for w in wanted
        if w.key in roles and not roles[w.key].endswith(f"/{w.role_name}")
    ]
    if conflicts:
        msg = (
            f"EKS cluster {cluster} already associates {plural(conflicts, 'service account')}: "
            "EKS takes one association per service account, so the function's cannot be created"
        )
        fix = (
            "delete those associations (aws eks list-pod-identity-associations --cluster-name "
            f"{cluster}; aws eks delete-pod-identity-association --cluster-name {cluster} "
            "--association-id ID), or remove them from the AWSManagedControlPlane or the tool "
            "that made them"
        )
        return Check(name, Status.FAIL, msg, fix)
    adding = sum(1 for w in wanted if w.key not in roles)
    total = count + adding
    said = (
        f"EKS cluster {cluster} has {count} Pod Identity associations; the function adds "
        f"{adding}: {total} of {ASSOCIATIONS_PER_CLUSTER}"
    )
    fix = (
        f"delete unused associations (aws eks list-pod-identity-associations --cluster-name "
        f"{cluster}); the limit of {ASSOCIATIONS_PER_CLUSTER} per cluster is not in Service Quotas"
    )
    if total > ASSOCIATIONS_PER_CLUSTER:
        return Check(name, Status.FAIL, f"{said}: creating them fails", fix)
    if total >= ASSOCIATIONS_WARN_AT:
        return Check(name, Status.WARN, said, fix)
    return Check(name, Status.PASS, said)


LEFTOVERS = "pod-identity/leftovers"


def leftovers_not_run(cluster: str, *, exists: bool | None) -> Check:
    """The leftover check without the workload cluster: why it did not run, how to run it."""
    if exists is False:
        msg = (
            f"the EKS cluster {cluster} does not exist yet: no ServiceAccount of it can carry "
            f"{ROLE_ARN_ANNOTATION}"
        )
        return Check(LEFTOVERS, Status.PASS, msg)
    msg = (
        f"not run: whether the add-ons' ServiceAccounts still carry {ROLE_ARN_ANNOTATION} "
        "(which keeps IRSA in use) is read from the workload cluster"
    )
    fix = (
        "pass --workload-kubeconfig FILE, the cluster's kubeconfig (aws eks update-kubeconfig "
        f"--name {cluster} --kubeconfig FILE, or clusterctl get kubeconfig)"
    )
    return Check(LEFTOVERS, Status.WARN, msg, fix)


def leftovers_unread(err: str) -> Check:
    """The workload cluster could not be read."""
    msg = f"could not read the workload cluster's ServiceAccounts: {err}"
    fix = "check --workload-kubeconfig (its server, credentials, and get on serviceaccounts)"
    return Check(LEFTOVERS, Status.WARN, msg, fix)


def check_leftovers(
    wanted: Sequence[Wanted], annotations: Mapping[tuple[str, str], Mapping[str, str] | None]
) -> Check:
    """The add-ons' ServiceAccounts as the workload cluster has them (None: absent).

    One still annotated with a role ARN keeps IRSA in use: the SDKs take the web identity
    the pod identity webhook injects before EKS Pod Identity's container credentials.
    """
    arns = {w.key: (annotations.get(w.key) or {}).get(ROLE_ARN_ANNOTATION) for w in wanted}
    found = [
        f"{w.path} ({w.addon}): {ROLE_ARN_ANNOTATION}={arns[w.key]}"
        for w in wanted
        if arns[w.key] is not None
    ]
    if found:
        msg = (
            f"{plural(found, 'ServiceAccount')}: still annotated, so their pods keep using IRSA "
            "(the SDKs try web identity before EKS Pod Identity)"
        )
        first = next(w for w in wanted if arns[w.key] is not None)
        fix = (
            f"remove the annotation (kubectl annotate serviceaccount -n {first.namespace} "
            f"{first.service_account} {ROLE_ARN_ANNOTATION}-, and for each other one; an EKS "
            "add-on's serviceAccountRoleARN in the AWSManagedControlPlane's spec.addons puts it "
            "back: remove that too), then restart the add-on's pods"
        )
        return Check(LEFTOVERS, Status.FAIL, msg, fix)
    present = [w.path for w in wanted if annotations.get(w.key) is not None]
    if not present:
        msg = "none of the add-ons' ServiceAccounts exists yet: nothing carries the annotation"
        return Check(LEFTOVERS, Status.PASS, msg)
    msg = f"{plural(present, 'ServiceAccount')}: no {ROLE_ARN_ANNOTATION} annotation"
    return Check(LEFTOVERS, Status.PASS, msg)
