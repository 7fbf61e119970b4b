"""Account preflight: will what the function composes work in this AWS account?

:func:`run` strings the checks (``checks``, ``issuer_checks``, ``role_checks``,
``dns_checks``, ``network_checks``) together for one :class:`~function_tools.aws.target.Target`.

Phases: ``before`` checks that nothing stands in the way of creating the
resources (account-level S3 Block Public Access, a bucket name taken by someone
else, an IAM OIDC provider or role that already exists and is not ours, the OIDC
provider quota, missing security-group ports). ``after`` also checks what the
function created: the public discovery documents, the JWKS against the
cluster's key, each role's trust policy and attached policies. ``auto`` is
``after`` when the issuer bucket exists, reporting resources not created yet as
warnings rather than failures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from function.addons.oidc_issuer import DistributionMode
from function.context import external_issuer
from function.names import partition_of
from function.policies import DISCOVERY_KEY, JWKS_KEY, pod_identity_trust_policy
from function.spec_base import IRSAMode
from function_tools.aws import cloudfront_checks as cf
from function_tools.aws.checks import (
    Check,
    Clients,
    Phase,
    Status,
    absent,
    check_credentials,
    not_found,
)
from function_tools.aws.dns_checks import check_hosted_zones
from function_tools.aws.issuer_checks import (
    BucketState,
    PrivateReader,
    check_account_public_access_block,
    check_api_server_issuer,
    check_bucket,
    check_bucket_public_access_block,
    check_discovery,
    check_external_oidc_provider,
    check_jwks,
    check_oidc_provider,
    provider_arn_for,
)
from function_tools.aws.network_checks import check_external_resource_gc, check_security_groups
from function_tools.aws.pod_identity_checks import (
    ASSUMED,
    DEFAULT_NODE_ROLE,
    Wanted,
    check_associations,
    check_leftovers,
    check_node_role,
    leftovers_not_run,
    leftovers_unread,
    node_roles,
)
from function_tools.aws.role_checks import (
    RoleExpectation,
    addon_roles,
    check_role,
    expected_policy_arn,
)
from function_tools.aws.target import Target

# The workload cluster's ServiceAccounts: (namespace, name) -> annotations, None when absent
# (``function_tools.aws.workload_cluster``); raises WorkloadUnreadError when it cannot be read.
ReadServiceAccounts = Callable[
    [Iterable[tuple[str, str]]], Mapping[tuple[str, str], Mapping[str, str] | None]
]


class WorkloadUnreadError(RuntimeError):
    """The workload cluster could not be read: the leftover check says why."""


_MARK = {Status.PASS: "PASS", Status.WARN: "WARN", Status.FAIL: "FAIL"}


@dataclass
class Report:
    """Every check of one preflight run, and what it was run against."""

    target: Target
    phase: Phase
    account: str | None = None
    checks: list[Check] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """Whether any check failed."""
        return any(c.status is Status.FAIL for c in self.checks)

    def summary(self) -> dict[str, int]:
        """How many checks passed, warned and failed."""
        return {s.value: sum(1 for c in self.checks if c.status is s) for s in Status}

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        t = self.target
        irsa = t.spec.irsa.mode
        return {
            "cluster": t.owner_tag,
            "region": t.region,
            "account": self.account,
            "phase": self.phase.value,
            "irsaMode": irsa.value,
            "bucket": t.names.issuer_bucket if irsa is IRSAMode.SELF_HOSTED else None,
            "issuerURL": (
                t.issuer_url if irsa not in (IRSAMode.DISABLED, IRSAMode.POD_IDENTITY) else None
            ),
            "checks": [c.to_dict() for c in self.checks],
            "summary": self.summary(),
        }

    def text(self) -> str:
        """A person-readable report: one line per check, the fix under each problem."""
        d = self.to_dict()
        account = d["account"] or "?"
        where = f"region {d['region']}  account {account}  phase {d['phase']}"
        head = [f"ClusterPlugin {d['cluster']}  {where}"]
        if d["bucket"]:
            head.append(f"bucket {d['bucket']}  issuer {d['issuerURL']}")
        elif d["issuerURL"]:
            head.append(f"issuer {d['issuerURL']}")
        width = max((len(c.name) for c in self.checks), default=0)
        lines = [*head, ""]
        for c in self.checks:
            lines.append(f"{_MARK[c.status]}  {c.name.ljust(width)}  {c.message}")
            if c.fix and c.status != Status.PASS:
                lines.append(f"{' ' * (6 + width)}  fix: {c.fix}")
        s = d["summary"]
        lines += ["", f"{s['pass']} passed, {s['warn']} warning(s), {s['fail']} failed"]
        return "\n".join(lines)


def _behind_cloudfront(report: Report, clients: Clients, phase: Phase) -> bool:
    """The issuer checks behind CloudFront; returns whether the run is in phase ``after``."""
    target = report.target
    strict = phase is Phase.AFTER
    names = target.names
    hosting = target.spec.irsa.cloud_front
    assert hosting is not None  # noqa: S101  # names.cloudfront is set from it
    keys = (names.issuer_key(DISCOVERY_KEY), names.issuer_key(JWKS_KEY))
    bucket = names.issuer_bucket
    report.checks.append(cf.check_account_public_access_block_behind_cloudfront())
    if hosting.distribution is DistributionMode.SHARED:
        region = hosting.bucket_region or target.region
        report.checks += cf.check_shared_bucket(clients.s3, bucket, region)
        origins = cf.bucket_origins(bucket, region, partition_of(region))
        found, dist = cf.check_shared_distribution(clients.cloudfront, hosting.domain, origins)
        report.checks += found
        report.checks.append(
            cf.check_shared_bucket_policy(clients.s3, bucket, keys, dist, target.partition)
        )
        after = strict or (phase is Phase.AUTO and cf.object_exists(clients.s3, bucket, keys[0]))
    else:
        report.checks.append(
            cf.check_certificate(clients.acm, hosting.certificate_arn, hosting.domain)
        )
        if hosting.hosted_zone_id:
            report.checks.append(
                cf.check_hosted_zone(clients.route53, hosting.hosted_zone_id, hosting.domain)
            )
        report.checks.append(
            cf.check_domain_free(clients.cloudfront, hosting.domain, target.owner_tag)
        )
        bucket_check, state = check_bucket(
            clients.s3, bucket, target.region, target.owner_tag, must_exist=strict
        )
        report.checks.append(bucket_check)
        after = strict or (phase is Phase.AUTO and state is BucketState.OURS)
        if after and state is BucketState.OURS:
            report.checks.append(cf.private_access_block(clients.s3, bucket))
    if after:
        report.checks += _documents(target, PrivateReader(clients.s3), bucket, strict=strict)
    return after


def _documents(target: Target, reader: Any, bucket: str, *, strict: bool) -> list[Check]:
    """The two documents, read as STS would (S3Public) or with the caller's credentials."""
    names = target.names
    return [
        check_discovery(
            reader,
            bucket,
            target.issuer_url,
            strict=strict,
            key=names.issuer_key(DISCOVERY_KEY),
        ),
        check_jwks(
            reader,
            bucket,
            target.public_pem,
            key_source=target.key_source,
            key_problem=target.key_problem,
            strict=strict,
            key=names.issuer_key(JWKS_KEY),
        ),
    ]


def _s3_public(report: Report, clients: Clients, account: str, phase: Phase) -> bool:
    """The public bucket's checks; returns whether the run is in phase ``after``."""
    target = report.target
    strict = phase is Phase.AFTER
    bucket = target.names.bucket
    report.checks.append(check_account_public_access_block(clients.s3control, account))
    bucket_check, state = check_bucket(
        clients.s3, bucket, target.region, target.owner_tag, must_exist=strict
    )
    report.checks.append(bucket_check)
    after = strict or (phase is Phase.AUTO and state is BucketState.OURS)
    if after and state is BucketState.OURS:
        report.checks.append(check_bucket_public_access_block(clients.s3, bucket, strict=strict))
        report.checks += _documents(target, clients.s3_anonymous, bucket, strict=strict)
    return after


def _self_hosted(report: Report, clients: Clients, account: str, phase: Phase) -> bool:
    """The issuer checks; returns whether the run is in phase ``after``."""
    target = report.target
    if target.names.cloudfront is not None:
        after = _behind_cloudfront(report, clients, phase)
    else:
        after = _s3_public(report, clients, account, phase)
    provider = provider_arn_for(target.partition, account, target.issuer_host_path)
    report.checks += check_oidc_provider(
        clients.iam, provider, target.owner_tag, after=after, strict=phase is Phase.AFTER
    )
    return after


def run(
    target: Target,
    clients: Clients,
    phase: Phase = Phase.AUTO,
    live: cf.Fetch | None = None,
    node_roles: tuple[str, ...] = (),
    *,
    service_accounts: ReadServiceAccounts | None = None,
) -> Report:
    """Every check that applies to ``target``, in the order the function creates things.

    ``live`` fetches the SelfHosted issuer's discovery URL as STS would (``--live``).
    ``node_roles``: EKS Pod Identity: the nodes' roles, which the agent asks with
    (``--node-role``); by default those the target's node groups name, else CAPA's default.
    ``service_accounts``: EKS Pod Identity: reads the workload cluster's ServiceAccounts
    (``--workload-kubeconfig``); without it the leftover check says it was not run.
    Each check turns AWS's "not found" answers it expects into a finding with its fix;
    one it does not expect (something deleted while preflight ran) ends the report
    with a FAIL naming it, never without the report.
    """
    report = Report(target, Phase.AFTER if phase is Phase.AFTER else Phase.BEFORE)
    try:
        return _run(report, clients, phase, live, node_roles, service_accounts=service_accounts)
    except ClientError as err:
        if not absent(err):
            raise
        report.checks.append(not_found(err))
        return report


def _role_expectations(report: Report, account: str, provider_arn: str) -> list[RoleExpectation]:
    """The add-on roles to check: IRSA's once the provider is known, or Pod Identity's."""
    target = report.target
    spec = target.spec
    eks_cluster = target.facts.eks_cluster_name
    pod_identity = spec.irsa.mode is IRSAMode.POD_IDENTITY
    if pod_identity and not eks_cluster:
        msg = (
            "the AWSManagedControlPlane's spec.eksClusterName, which every role's trust names, "
            "is unknown: the add-on roles are not checked"
        )
        fix = "pass the AWSManagedControlPlane with --required"
        report.checks.append(Check("pod-identity/eks-cluster", Status.WARN, msg, fix))
        return []
    if not pod_identity and not provider_arn:
        return []
    out = []
    for addon in addon_roles(spec):
        trust = ""
        if pod_identity and eks_cluster:
            trust = pod_identity_trust_policy(
                target.partition, target.region, eks_cluster, addon.namespace, addon.service_account
            )
        out.append(
            RoleExpectation(
                role_name=target.names.role(addon.addon),
                addon=addon,
                owner_tag=target.owner_tag,
                provider_arn=provider_arn,
                issuer_host_path=target.issuer_host_path if provider_arn else "",
                policy_arn=expected_policy_arn(target, account, addon),
                pod_identity_trust=trust,
            )
        )
    return out


def _exists(iam: Any, role: str) -> bool:
    try:
        iam.get_role(RoleName=role)
    except ClientError as err:
        if not absent(err, "NoSuchEntity"):
            raise
        return False
    return True


def _external(report: Report, clients: Clients, account: str) -> str:
    """External IRSA: the provider's check; its ARN ("" when not known)."""
    target = report.target
    external = external_issuer(target.spec, target.facts)
    if external is None:
        report.checks.append(
            Check(
                "oidc-provider",
                Status.FAIL,
                "spec.irsa leaves issuerURL and oidcProviderARN to the AWSManagedControlPlane, "
                "whose status.oidcProvider.arn is not known",
                "pass the AWSManagedControlPlane with --required once CAPA created the provider",
            )
        )
        return ""
    report.checks.append(
        check_external_oidc_provider(clients.iam, external[1], target.issuer_host_path, account)
    )
    return external[1]


def _pod_identity_cluster(
    report: Report,
    clients: Clients,
    wants: list[RoleExpectation],
    *,
    strict: bool,
    read: ReadServiceAccounts | None,
) -> None:
    """Pod Identity: the EKS cluster's associations, then the workload cluster's leftovers."""
    cluster = report.target.facts.eks_cluster_name
    if report.target.spec.irsa.mode is not IRSAMode.POD_IDENTITY or not wants or not cluster:
        return
    wanted = [
        Wanted(w.addon.addon, w.addon.namespace, w.addon.service_account, w.role_name)
        for w in wants
    ]
    check, exists = check_associations(clients.eks, cluster, wanted, strict=strict)
    report.checks.append(check)
    if read is None:
        report.checks.append(leftovers_not_run(cluster, exists=exists))
        return
    try:
        found = read([w.key for w in wanted])
    except WorkloadUnreadError as err:
        report.checks.append(leftovers_unread(str(err)))
        return
    report.checks.append(check_leftovers(wanted, found))


def _api_server_issuer(report: Report) -> None:
    """IRSA: the API server signs with the issuer the roles trust (the control plane given)."""
    check = check_api_server_issuer(report.target)
    if check is not None:
        report.checks.append(check)


def _node_roles(target: Target, clients: Clients, explicit: tuple[str, ...]) -> list[Check]:
    """Pod Identity: each role the nodes run with allows the agent's call.

    ``--node-role`` names them; else the node groups given with ``--required`` do; else
    CAPA's default role for managed node groups is checked, saying so.
    """
    partition = target.partition
    if explicit:
        return [check_node_role(clients.iam, r, partition) for r in explicit]
    if not target.node_identities:
        return [check_node_role(clients.iam, DEFAULT_NODE_ROLE, partition, ASSUMED)]
    roles, checks = node_roles(clients.iam, target.node_identities)
    for role, used_by in roles.items():
        checks.append(check_node_role(clients.iam, role, partition, ", ".join(used_by)))
    return checks


def _run(
    report: Report,
    clients: Clients,
    phase: Phase,
    live: cf.Fetch | None,
    node_roles: tuple[str, ...],
    *,
    service_accounts: ReadServiceAccounts | None,
) -> Report:
    target = report.target
    cred, account = check_credentials(clients.sts)
    report.checks.append(cred)
    if account is None:
        return report
    report.account = account
    spec = target.spec
    mode = spec.irsa.mode
    strict = phase is Phase.AFTER
    after = strict
    provider_arn = ""
    if not target.accepted.wants_irsa or mode is IRSAMode.DISABLED:
        why = "IRSA is Disabled" if mode is IRSAMode.DISABLED else "no add-on needs an IAM role"
        msg = f"{why}: no bucket, OIDC provider or roles are composed"
        report.checks.append(Check("irsa", Status.PASS, msg))
    elif mode is IRSAMode.POD_IDENTITY:
        msg = "EKS Pod Identity: no bucket or OIDC provider; roles trust pods.eks.amazonaws.com"
        report.checks.append(Check("irsa", Status.PASS, msg))
        report.checks += _node_roles(target, clients, node_roles)
    elif mode is IRSAMode.SELF_HOSTED:
        _api_server_issuer(report)
        after = _self_hosted(report, clients, account, phase)
        if live is not None:
            report.checks.append(cf.check_live(live, target.issuer_url))
        provider_arn = provider_arn_for(target.partition, account, target.issuer_host_path)
    else:
        _api_server_issuer(report)
        provider_arn = _external(report, clients, account)
    wants = _role_expectations(report, account, provider_arn)
    if mode is IRSAMode.POD_IDENTITY and not strict:
        # Auto: after, once the function has made one of the roles (it makes them at once).
        after = any(_exists(clients.iam, w.role_name) for w in wants)
    report.phase = Phase.AFTER if after else Phase.BEFORE
    for want in wants:
        report.checks += check_role(clients.iam, want, after=after, strict=strict)
    _pod_identity_cluster(report, clients, wants, strict=strict, read=service_accounts)
    if spec.dns.external_dns is not None:
        report.checks += check_hosted_zones(clients.route53, spec.dns.external_dns, account)
    report.checks += check_security_groups(clients.ec2, target, after=after, strict=strict)
    gc = check_external_resource_gc(target)
    if gc is not None:
        report.checks.append(gc)
    return report
