"""``aws preflight``: the add-ons' IRSA roles.

Each is free or ours, trusts exactly its ServiceAccount, and holds exactly its one
policy. Which roles there are comes from the add-ons' declarations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from botocore.exceptions import ClientError

from function import registry
from function.names import CLUSTER_TAG, IAM_PATH
from function.policies import STS_AUDIENCE, managed_policy_arn, trust_policy
from function.spec import ClusterPluginSpec
from function.spec_base import IRSAMode
from function_tools.aws.checks import (
    RENAME_FIX,
    Check,
    Status,
    code,
    missing,
    owner_phrase,
    plural,
    tag_map,
)
from function_tools.aws.target import Target

WEB_IDENTITY = "sts:AssumeRoleWithWebIdentity"


@dataclass(frozen=True)
class AddonRole:
    """An add-on's IRSA role: its Names key, the service account it trusts, its policy."""

    addon: str  # the add-on's part of its IAM names (Names.role, Names.policy)
    namespace: str
    service_account: str
    # The AWS-managed policy it gets ("": a customer-managed one of its own).
    managed_policy: str = ""


def addon_roles(spec: ClusterPluginSpec) -> list[AddonRole]:
    """The roles the function composes for ``spec`` (none when IRSA is Disabled)."""
    if spec.irsa.mode is IRSAMode.DISABLED:
        return []
    return [
        AddonRole(
            a.role.iam_name, a.release.namespace, a.release.service_account, a.role.managed_policy
        )
        for a in registry.WITH_ROLES
        if a.role is not None and a.release is not None and a.spec(spec) is not None
    ]


def expected_policy_arn(target: Target, account: str, role: AddonRole) -> str:
    """The one policy an add-on's role should have attached."""
    if role.managed_policy:
        return managed_policy_arn(role.managed_policy, target.partition)
    name = target.names.policy(role.addon)
    return f"arn:{target.partition.name}:iam::{account}:policy{IAM_PATH}{name}"


def _as_list(v: Any) -> list[Any]:
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


def _document(doc: Any) -> dict[str, Any]:
    if isinstance(doc, str):
        doc = json.loads(unquote(doc))
    return doc if isinstance(doc, dict) else {}


def _claim_problems(conditions: dict[str, Any], claim: str, want_key: str, want: str) -> list[str]:
    """What is wrong with the condition(s) on one token claim (``sub`` or ``aud``)."""
    hits = [
        (op, key, _as_list(val))
        for op, kv in conditions.items()
        if isinstance(kv, dict)
        for key, val in kv.items()
        if key.rsplit(":", 1)[-1] == claim
    ]
    if not hits:
        return [f"trust policy has no {claim} condition, expected {want_key} = {want}"]
    problems = []
    for op, key, vals in hits:
        issuer = key.rsplit(":", 1)[0]
        if key != want_key:
            expected_issuer = want_key.rsplit(":", 1)[0]
            problems.append(
                f"trust policy {claim} is keyed on {issuer}, expected {expected_issuer}"
            )
        if op != "StringEquals":
            problems.append(f"trust policy {claim} is matched with {op}, expected StringEquals")
        if vals != [want]:
            problems.append(f"trust policy {claim} is {', '.join(map(str, vals))}, expected {want}")
    return problems


def trust_policy_problems(
    document: Any,
    *,
    provider_arn: str,
    issuer_host_path: str,
    namespace: str,
    service_account: str,
) -> list[str]:
    """How a role's trust policy differs, in meaning, from the one the function writes."""
    statements = [s for s in _as_list(_document(document).get("Statement")) if isinstance(s, dict)]
    web = [
        s
        for s in statements
        if s.get("Effect") == "Allow" and WEB_IDENTITY in _as_list(s.get("Action"))
    ]
    if not web:
        return [f"trust policy has no Allow statement for {WEB_IDENTITY}"]
    problems: list[str] = []
    if len(statements) != 1:
        problems.append(f"trust policy has {len(statements)} statements, expected exactly 1")
    st = web[0]
    extra_actions = [str(a) for a in _as_list(st.get("Action")) if a != WEB_IDENTITY]
    if extra_actions:
        problems.append(f"trust policy also allows {', '.join(extra_actions)}")
    principal = st.get("Principal")
    federated = _as_list(principal.get("Federated")) if isinstance(principal, dict) else []
    if federated != [provider_arn]:
        got = ", ".join(map(str, federated)) or repr(principal)
        problems.append(f"trust policy Federated principal is {got}, expected {provider_arn}")
    conditions = st.get("Condition")
    conditions = conditions if isinstance(conditions, dict) else {}
    sub = f"system:serviceaccount:{namespace}:{service_account}"
    problems += _claim_problems(conditions, "sub", f"{issuer_host_path}:sub", sub)
    problems += _claim_problems(conditions, "aud", f"{issuer_host_path}:aud", STS_AUDIENCE)
    return problems


def _attached(iam: Any, role: str) -> tuple[list[str], list[str]]:
    arns: list[str] = []
    for page in iam.get_paginator("list_attached_role_policies").paginate(RoleName=role):
        arns += [p["PolicyArn"] for p in page.get("AttachedPolicies", [])]
    inline: list[str] = []
    for page in iam.get_paginator("list_role_policies").paginate(RoleName=role):
        inline += page.get("PolicyNames", [])
    return arns, inline


@dataclass(frozen=True)
class RoleExpectation:
    """What one add-on role should look like."""

    role_name: str
    addon: AddonRole
    owner_tag: str
    provider_arn: str
    issuer_host_path: str
    policy_arn: str
    # EKS Pod Identity: the trust policy the function writes (instead of an IRSA one).
    pod_identity_trust: str = ""


def _pod_identity_problems(document: Any, want: str) -> list[str]:
    """A Pod Identity role's trust policy is exactly the function's (it owns every word)."""
    if _document(document) == json.loads(want):
        return []
    return ["trust policy is not the function's EKS Pod Identity trust policy"]


def check_role(iam: Any, want: RoleExpectation, *, after: bool, strict: bool) -> list[Check]:
    """An add-on role is absent or ours; when present, its trust policy and policies."""
    name = f"role/{want.addon.addon}"
    role_name = want.role_name
    try:
        role = iam.get_role(RoleName=role_name)["Role"]
    except ClientError as err:
        if code(err) != "NoSuchEntity":
            raise
        if not after:
            return [
                Check(name, Status.PASS, f"role name {role_name} is free; the function creates it")
            ]
        made = "at once" if want.pod_identity_trust else "once the OIDC provider is ready"
        msg = f"role {role_name} does not exist yet (made {made})"
        fix = f"check the {want.addon.addon} role managed resource and status.plugins"
        return [Check(name, missing(strict=strict), msg, fix)]
    owner = tag_map(role.get("Tags")).get(CLUSTER_TAG)
    if owner != want.owner_tag:
        msg = (
            f"role {role_name} already exists and {owner_phrase(owner)}, not {want.owner_tag}: "
            "Crossplane would take it over and replace its trust policy"
        )
        return [Check(name, Status.FAIL, msg, RENAME_FIX)]
    problems = []
    if role.get("Path") != IAM_PATH:
        problems.append(
            f"role path is {role.get('Path')}, expected {IAM_PATH} (the provider policy's scope)"
        )
    sa = want.addon
    if want.pod_identity_trust:
        problems += _pod_identity_problems(
            role.get("AssumeRolePolicyDocument"), want.pod_identity_trust
        )
    else:
        problems += trust_policy_problems(
            role.get("AssumeRolePolicyDocument"),
            provider_arn=want.provider_arn,
            issuer_host_path=want.issuer_host_path,
            namespace=sa.namespace,
            service_account=sa.service_account,
        )
    if problems:
        doc = want.pod_identity_trust or trust_policy(
            want.provider_arn, want.issuer_host_path, sa.namespace, sa.service_account
        )
        trust = Check(
            name,
            Status.FAIL,
            f"role {role_name}: " + "; ".join(problems),
            f"aws iam update-assume-role-policy --role-name {role_name} --policy-document '{doc}' "
            "(Crossplane reverts manual drift, so a lasting difference means another "
            "controller or person manages this role)",
        )
    elif want.pod_identity_trust:
        trust = Check(
            name,
            Status.PASS,
            f"role {role_name} trusts only {sa.namespace}/{sa.service_account} of this EKS "
            "cluster, through EKS Pod Identity",
        )
    else:
        trust = Check(
            name,
            Status.PASS,
            f"role {role_name} trusts only system:serviceaccount:{sa.namespace}:"
            f"{sa.service_account}, audience {STS_AUDIENCE}, via {want.provider_arn}",
        )
    return [trust, _check_role_policies(iam, want, strict=strict)]


def _check_role_policies(iam: Any, want: RoleExpectation, *, strict: bool) -> Check:
    name = f"role/{want.addon.addon}/policies"
    role = want.role_name
    attached, inline = _attached(iam, role)
    extra = [a for a in attached if a != want.policy_arn]
    problems = []
    fixes = []
    if extra:
        problems.append(f"unexpected attached {plural(extra, 'policy')}")
        fixes += [f"aws iam detach-role-policy --role-name {role} --policy-arn {a}" for a in extra]
    if inline:
        problems.append(f"unexpected inline {plural(inline, 'policy')}")
        fixes += [
            f"aws iam delete-role-policy --role-name {role} --policy-name {p}" for p in inline
        ]
    if want.policy_arn not in attached:
        problems.append(f"{want.policy_arn} is not attached")
        fixes.append(f"check the {want.addon.addon} role's attachment managed resource")
    if not problems:
        return Check(name, Status.PASS, f"role {role} has exactly {want.policy_arn} attached")
    status = Status.FAIL if (extra or inline) else missing(strict=strict)
    return Check(name, status, f"role {role}: " + "; ".join(problems), "; ".join(fixes))
