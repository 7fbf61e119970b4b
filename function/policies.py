"""IAM and S3 policy documents: built once per distinct input, always compact JSON.

Security properties held here (and tested):
- a trust policy names exactly one OIDC provider, one service account and the
  ``sts.amazonaws.com`` audience (StringEquals, no wildcards); a Pod Identity trust
  policy names the EKS service principal and, through the session tags EKS adds to its
  AssumeRole request, exactly one service account of one cluster (its name, and its ARN
  in the cluster's region; the account is a wildcard, as EKS associates only roles of
  the cluster's own account);
- the only ``*`` principal in an Allow is the public read of the two discovery
  documents of an S3Public issuer; behind CloudFront, only the CloudFront service
  principal may read them, for one distribution (``AWS:SourceArn``), which S3 does
  not count as public; every bucket policy also denies plain-HTTP access.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from function.names import Partition

STS_AUDIENCE = "sts.amazonaws.com"
DISCOVERY_KEY = ".well-known/openid-configuration"
JWKS_KEY = "keys.json"


def _compact(doc: object) -> str:
    return json.dumps(doc, separators=(",", ":"))


def managed_policy_arn(path: str, partition: Partition) -> str:
    """The ARN of an AWS-managed policy (``policy/AmazonEKS_CNI_Policy``) in ``partition``."""
    return f"arn:{partition.name}:iam::aws:{path}"


@functools.lru_cache(maxsize=1024)
def trust_policy(
    provider_arn: str, issuer_host_path: str, namespace: str, service_account: str
) -> str:
    """The IRSA trust policy: one provider, one service account, one audience."""
    subject = f"system:serviceaccount:{namespace}:{service_account}"
    return _compact(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Federated": provider_arn},
                    "Action": "sts:AssumeRoleWithWebIdentity",
                    "Condition": {
                        "StringEquals": {
                            f"{issuer_host_path}:sub": subject,
                            f"{issuer_host_path}:aud": STS_AUDIENCE,
                        }
                    },
                }
            ],
        }
    )


POD_IDENTITY_SERVICE = "pods.eks.amazonaws.com"
# The session tags EKS Pod Identity adds to its AssumeRole request (EKS user guide,
# "List of session tags added by EKS Pod Identity"), which a trust policy sees as
# aws:RequestTag/<key>. Unless an association sets disableSessionTags, which the
# function never does.
POD_IDENTITY_TAGS = (
    "eks-cluster-arn",
    "eks-cluster-name",
    "kubernetes-namespace",
    "kubernetes-service-account",
)


@functools.lru_cache(maxsize=1024)
def pod_identity_trust_policy(
    partition: Partition, region: str, eks_cluster: str, namespace: str, service_account: str
) -> str:
    """The EKS Pod Identity trust policy: one service account of one cluster."""
    tag = "aws:RequestTag/"
    return _compact(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": POD_IDENTITY_SERVICE},
                    "Action": ["sts:AssumeRole", "sts:TagSession"],
                    "Condition": {
                        "StringEquals": {
                            f"{tag}eks-cluster-name": eks_cluster,
                            f"{tag}kubernetes-namespace": namespace,
                            f"{tag}kubernetes-service-account": service_account,
                        },
                        "StringLike": {
                            f"{tag}eks-cluster-arn": (
                                f"arn:{partition.name}:eks:{region}:*:cluster/{eks_cluster}"
                            )
                        },
                    },
                }
            ],
        }
    )


@functools.lru_cache(maxsize=1024)
def bucket_policy(bucket: str, partition: Partition) -> str:
    """Public read of the two discovery documents only; deny any non-TLS access."""
    arn = f"arn:{partition.name}:s3:::{bucket}"
    return _compact(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "PublicReadOIDCDiscovery",
                    "Effect": "Allow",
                    "Principal": "*",
                    "Action": "s3:GetObject",
                    "Resource": [f"{arn}/{DISCOVERY_KEY}", f"{arn}/{JWKS_KEY}"],
                },
                _deny_insecure_transport(arn),
            ],
        }
    )


CLOUDFRONT_SERVICE = "cloudfront.amazonaws.com"


def _deny_insecure_transport(bucket_arn: str) -> dict[str, object]:
    return {
        "Sid": "DenyInsecureTransport",
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": [bucket_arn, f"{bucket_arn}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


def cloudfront_read_statement(resources: list[str], distribution_arn: str) -> dict[str, object]:
    """GetObject on ``resources`` for CloudFront, on behalf of one distribution only.

    AWS's own statement for an origin access control. A service principal under a
    fixed ``AWS:SourceArn`` is not public to S3, so Block Public Access lets it be.
    """
    return {
        "Sid": "CloudFrontReadsOIDCDiscovery",
        "Effect": "Allow",
        "Principal": {"Service": CLOUDFRONT_SERVICE},
        "Action": "s3:GetObject",
        "Resource": resources,
        "Condition": {"StringEquals": {"AWS:SourceArn": distribution_arn}},
    }


@functools.lru_cache(maxsize=1024)
def cloudfront_bucket_policy(
    bucket: str, keys: tuple[str, ...], distribution_arn: str, partition: Partition
) -> str:
    """A Managed distribution's bucket: only it may read the two documents; deny non-TLS."""
    arn = f"arn:{partition.name}:s3:::{bucket}"
    return _compact(
        {
            "Version": "2012-10-17",
            "Statement": [
                cloudfront_read_statement([f"{arn}/{k}" for k in keys], distribution_arn),
                _deny_insecure_transport(arn),
            ],
        }
    )


def shared_bucket_policy(
    bucket: str, distribution_arn: str, partition: Partition
) -> dict[str, object]:
    """What the platform team puts on a Shared distribution's bucket, once.

    Every cluster's documents are at ``<namespace>/<cluster>/...``: the distribution
    may read those two names under any such path, and nothing else.
    """
    arn = f"arn:{partition.name}:s3:::{bucket}"
    resources = [f"{arn}/*/{DISCOVERY_KEY}", f"{arn}/*/{JWKS_KEY}"]
    return {
        "Version": "2012-10-17",
        "Statement": [
            cloudfront_read_statement(resources, distribution_arn),
            _deny_insecure_transport(arn),
        ],
    }


# The load balancer controller's policy per chart version: the upstream iam_policy.json of
# the controller version each chart installs (function/data/PROVENANCE.md). It changed at
# v2.7, v2.9, v2.10, v2.11, v2.12 and v2.13, and is the same from v2.13.0 to v3.5.0.
LBC_CHART = "aws-load-balancer-controller"
# The Composition's default chart (function/step_input.py Charts.load_balancer_controller).
LBC_DEFAULT_CHART_VERSION = "3.5.0"


class UnknownChartVersionError(ValueError):
    """A chart version the function has no data for (the caller turns it into a FATAL)."""

    def __init__(self, chart: str, version: str, known: str) -> None:
        self.chart = chart
        self.version = version
        self.known = known
        super().__init__(
            f"{chart} chart {version} is not one the function has an IAM policy for "
            f"(it knows {known})"
        )


@functools.cache
def _lbc_versions() -> dict[str, tuple[str, str]]:
    """Chart version -> (controller version, the version whose iam_policy.json applies)."""
    raw = resources.files("function.data").joinpath("aws-load-balancer-controller-versions.json")
    charts = json.loads(raw.read_text())["charts"]
    return {chart: (row["app"], row["policy"]) for chart, row in charts.items()}


def lbc_chart_versions() -> tuple[str, ...]:
    """The load balancer controller chart versions with a policy, oldest first."""
    return tuple(_lbc_versions())


def _lbc_row(chart_version: str) -> tuple[str, str]:
    versions = _lbc_versions()
    row = versions.get(chart_version.removeprefix("v"))
    if row is None:
        charts = lbc_chart_versions()
        raise UnknownChartVersionError(LBC_CHART, chart_version, f"{charts[0]} to {charts[-1]}")
    return row


def lbc_app_version(chart_version: str) -> str:
    """The controller version a load balancer controller chart version installs.

    Raises:
        UnknownChartVersionError: For a chart version outside the table.
    """
    return _lbc_row(chart_version)[0]


def lbc_policy_version(chart_version: str) -> str:
    """The controller version whose upstream policy a chart version needs.

    E.g. v2.13.0 for every chart from 1.13.0 to 3.5.0: two chart versions with the same
    one need no IAM change between them.

    Raises:
        UnknownChartVersionError: For a chart version outside the table.
    """
    return _lbc_row(chart_version)[1]


@functools.cache
def _lbc_policy_aws(policy_version: str) -> str:
    name = f"aws-load-balancer-controller-iam_policy-{policy_version}.json"
    raw = resources.files("function.data").joinpath(name)
    # Minified each is 4.8k to 5.2k characters, under the 6,144 limit of a managed policy.
    return _compact(json.loads(raw.read_text()))


@functools.lru_cache(maxsize=64)
def lbc_policy(partition: Partition, chart_version: str = LBC_DEFAULT_CHART_VERSION) -> str:
    """The AWS Load Balancer Controller policy of ``chart_version``'s controller, for ``partition``.

    Raises:
        UnknownChartVersionError: For a chart version outside the table.
    """
    doc = _lbc_policy_aws(lbc_policy_version(chart_version))
    if partition.name == "aws":
        return doc
    return doc.replace('"arn:aws:', f'"arn:{partition.name}:')


# A statement's scope apart from its actions and resources: statements with equal scopes
# grant the product of their actions and resources under the same conditions.
_SCOPE_KEYS = ("Effect", "Principal", "NotPrincipal", "Condition")


def _as_list(value: object) -> list[object]:
    return value if isinstance(value, list) else [value]


def _scope(statement: dict[str, object]) -> str:
    return json.dumps({k: statement.get(k) for k in _SCOPE_KEYS}, sort_keys=True)


def _mergeable(statement: dict[str, object]) -> bool:
    # NotAction/NotResource invert a grant: such a statement is only ever kept whole.
    return "Action" in statement and "Resource" in statement and not (
        "NotAction" in statement or "NotResource" in statement
    )


def _add_statement(out: list[dict[str, object]], statement: dict[str, object]) -> None:
    """Add a later document's ``statement`` to ``out``, granting exactly the union.

    Dropped when a kept statement of the same scope has all its actions and resources;
    else merged into the kept statement of the same scope and resources that shares most
    of its actions (its new actions appended); else appended, its Sid numbered if taken.
    Only literal strings are compared, never wildcards: nothing is granted twice over or
    widened.
    """
    if statement in out:
        return
    if _mergeable(statement):
        scope = _scope(statement)
        actions = _as_list(statement["Action"])
        resources_ = set(_as_list(statement["Resource"]))
        same = [k for k in out if _mergeable(k) and _scope(k) == scope]
        for kept in same:
            if set(actions) <= set(_as_list(kept["Action"])) and resources_ <= set(
                _as_list(kept["Resource"])
            ):
                return
        merge = [k for k in same if set(_as_list(k["Resource"])) == resources_]
        if merge:
            kept = max(merge, key=lambda k: len(set(actions) & set(_as_list(k["Action"]))))
            kept_actions = _as_list(kept["Action"])
            kept["Action"] = kept_actions + [a for a in actions if a not in kept_actions]
            return
    sids = {kept["Sid"] for kept in out if "Sid" in kept}
    if "Sid" in statement and statement["Sid"] in sids:
        # Sids must be unique in a policy (and alphanumeric): number the later one.
        sid = str(statement["Sid"])
        n = 2
        while f"{sid}{n}" in sids:
            n += 1
        statement = {**statement, "Sid": f"{sid}{n}"}
    out.append(statement)


def _statements(text: str) -> list[dict[str, object]]:
    doc: dict[str, Any] = json.loads(text)
    if doc.get("Version") != "2012-10-17":
        msg = f"union_policy takes 2012-10-17 policies, not Version {doc.get('Version')!r}"
        raise ValueError(msg)
    statements = doc["Statement"]
    return statements if isinstance(statements, list) else [statements]


@functools.lru_cache(maxsize=64)
def union_policy(*documents: str) -> str:
    """One identity policy granting exactly what any of ``documents`` grants, as compact JSON.

    What IAM allows with all of them attached to one role, in one document. The first
    document's statements come first, unchanged; each later statement is dropped, merged or
    appended (``_add_statement``). The union of a policy with itself is that policy. Each
    load balancer controller version adds actions to a few statements of the one before,
    so the union of two versions is as long as the newer.
    """
    if not documents:
        msg = "union_policy needs at least one document"
        raise ValueError(msg)
    statements = _statements(documents[0])
    for text in documents[1:]:
        for statement in _statements(text):
            _add_statement(statements, statement)
    return _compact({"Version": "2012-10-17", "Statement": statements})


# external-dns needs these on each hosted zone it manages (upstream docs/tutorials/aws.md),
# and ListHostedZones, which has no resource scope, to find them.
EXTERNAL_DNS_ZONE_ACTIONS = (
    "route53:ChangeResourceRecordSets",
    "route53:ListResourceRecordSets",
    "route53:ListTagsForResources",
)


def hosted_zone_arn(zone_id: str, partition: Partition) -> str:
    """The ARN of a Route 53 hosted zone (Route 53 ARNs have no region or account)."""
    return f"arn:{partition.name}:route53:::hostedzone/{zone_id}"


@functools.lru_cache(maxsize=1024)
def external_dns_policy(zone_ids: tuple[str, ...], partition: Partition) -> str:
    """external-dns's policy: record changes in exactly ``zone_ids``, never ``hostedzone/*``.

    The upstream example grants every zone of the account, so any cluster could
    rewrite any other's records; here each role reaches only the zones its XR lists.
    """
    if not zone_ids:
        # spec.py refuses an empty list; a policy without zones must never be written.
        msg = "external-dns needs at least one hosted zone"
        raise ValueError(msg)
    return _compact(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "ChangeRecordsInListedZones",
                    "Effect": "Allow",
                    "Action": list(EXTERNAL_DNS_ZONE_ACTIONS),
                    "Resource": [hosted_zone_arn(z, partition) for z in zone_ids],
                },
                {
                    "Sid": "ListHostedZones",
                    "Effect": "Allow",
                    "Action": "route53:ListHostedZones",
                    "Resource": "*",
                },
            ],
        }
    )
