"""The least-privilege IAM identity policy for the Crossplane AWS provider's credentials.

It covers exactly what the function composes, and the calls the provider (the
Terraform AWS provider under Upjet) makes to create, refresh, update and delete
those resources:

- the issuer bucket (``<namePrefix>irsa-...``) with its ownership controls,
  public access block, bucket policy and tags, and its two discovery objects;
- the IAM OIDC provider for that bucket's issuer URL;
- add-on IAM roles and the customer-managed policies (the Load Balancer
  Controller's, external-dns's), all under the IAM path ``/clusterplugin/``, and
  their policy attachments, restricted to the three AWS-managed add-on policies and
  policies under that path. external-dns's Route 53 grants are in its policy
  *document*; creating that document needs no Route 53 permission, so the
  provider gets none;
- security-group ingress rules (and their tags);
- only when asked for (``spec.irsa.hosting: CloudFront``): the OIDC providers of the
  issuer domains given, the two documents under any path in a Shared distribution's
  bucket, a Managed distribution with its origin access control, and the alias record
  of an issuer domain in the hosted zones given (``cloudfront_policy``);
- only when asked for (``spec.irsa.mode: PodIdentity``, ``pod_identity_statements``):
  the EKS Pod Identity associations of the EKS clusters given, and ``iam:PassRole`` of
  the add-on roles to EKS Pod Identity only (``iam:PassedToService``), which creating
  an association needs.

Not granted, on purpose:

- ``iam:PassRole`` beyond that: no other AWS service is ever handed one of these
  roles (no EC2 instance profile, Lambda or similar). With IRSA pods assume them
  through ``sts:AssumeRoleWithWebIdentity``, which the role's trust policy
  authorises, not the identity that created the role.
- EKS add-ons (``eks:CreateAddon``): the eks-pod-identity-agent is a Helm release or
  CAPA's, never the function's EKS add-on (CAPA deletes those it does not list).
- ``iam:CreateServiceLinkedRole``, ``s3:PutBucketAcl``, ``s3:PutObjectAcl``:
  nothing composed needs them (ACLs are disabled with BucketOwnerEnforced).
- ``sts:GetCallerIdentity`` (the provider calls it at start-up) needs no grant:
  AWS always allows it.

Most IAM, S3 and EC2 actions here support resource-level permissions; the
statements that must use ``"Resource": "*"`` are the List/Describe calls AWS
does not scope (``iam:ListOpenIDConnectProviders``, ``ec2:Describe*`` below).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from function.addons.oidc_issuer import ISSUER_DOMAIN
from function.names import IAM_PATH, PARTITIONS
from function.policies import (
    DISCOVERY_KEY,
    JWKS_KEY,
    POD_IDENTITY_SERVICE,
    hosted_zone_arn,
    managed_policy_arn,
)
from function.registry import MANAGED_POLICIES
from function.spec_base import HOSTED_ZONE_ID, s3_bucket_name_problem

# Bucket-level S3 actions. The provider reads all of the Get* ones on every
# refresh of an aws_s3_bucket (Terraform's resourceBucketRead reads ACL, CORS,
# website, versioning, acceleration, request payment, logging, lifecycle,
# replication, encryption, object lock, location and tags), even when unset.
S3_BUCKET_ACTIONS = (
    "s3:CreateBucket",
    "s3:DeleteBucket",
    "s3:ListBucket",  # HeadBucket
    "s3:GetBucketLocation",
    "s3:GetBucketTagging",
    "s3:PutBucketTagging",
    "s3:GetBucketPolicy",
    "s3:PutBucketPolicy",
    "s3:DeleteBucketPolicy",
    "s3:GetBucketOwnershipControls",
    "s3:PutBucketOwnershipControls",  # also DeleteBucketOwnershipControls
    "s3:GetBucketPublicAccessBlock",
    "s3:PutBucketPublicAccessBlock",  # also DeletePublicAccessBlock
    # Read on refresh by aws_s3_bucket:
    "s3:GetBucketAcl",
    "s3:GetBucketCORS",
    "s3:GetBucketWebsite",
    "s3:GetBucketVersioning",
    "s3:GetAccelerateConfiguration",
    "s3:GetBucketRequestPayment",
    "s3:GetBucketLogging",
    "s3:GetLifecycleConfiguration",
    "s3:GetReplicationConfiguration",
    "s3:GetEncryptionConfiguration",
    "s3:GetBucketObjectLockConfiguration",
)

# The two discovery documents: PutObject (with tags on create), HeadObject
# (s3:GetObject), tags on refresh and update, DeleteObject (unversioned bucket).
S3_OBJECT_ACTIONS = (
    "s3:PutObject",
    "s3:GetObject",
    "s3:DeleteObject",
    "s3:GetObjectTagging",
    "s3:PutObjectTagging",
)

IAM_ROLE_ACTIONS = (
    "iam:CreateRole",
    "iam:GetRole",
    "iam:DeleteRole",
    "iam:TagRole",
    "iam:UntagRole",
    "iam:ListRoleTags",
    "iam:UpdateRole",
    "iam:UpdateRoleDescription",
    "iam:UpdateAssumeRolePolicy",
    # Read on refresh (inline_policy, managed_policy_arns) and before delete.
    "iam:ListRolePolicies",
    "iam:ListAttachedRolePolicies",
    "iam:ListInstanceProfilesForRole",
)

IAM_ATTACH_ACTIONS = ("iam:AttachRolePolicy", "iam:DetachRolePolicy")

IAM_POLICY_ACTIONS = (
    "iam:CreatePolicy",
    "iam:GetPolicy",
    "iam:GetPolicyVersion",
    "iam:ListPolicyVersions",
    "iam:CreatePolicyVersion",
    "iam:DeletePolicyVersion",
    "iam:DeletePolicy",
    "iam:TagPolicy",
    "iam:UntagPolicy",
    "iam:ListPolicyTags",
)

OIDC_PROVIDER_ACTIONS = (
    "iam:CreateOpenIDConnectProvider",
    "iam:GetOpenIDConnectProvider",
    "iam:DeleteOpenIDConnectProvider",
    "iam:TagOpenIDConnectProvider",
    "iam:UntagOpenIDConnectProvider",
    "iam:ListOpenIDConnectProviderTags",
    "iam:UpdateOpenIDConnectProviderThumbprint",
    "iam:AddClientIDToOpenIDConnectProvider",
    "iam:RemoveClientIDFromOpenIDConnectProvider",
)

EC2_RULE_ACTIONS = (
    "ec2:AuthorizeSecurityGroupIngress",
    "ec2:RevokeSecurityGroupIngress",
    "ec2:ModifySecurityGroupRules",
)

EC2_TAG_ACTIONS = ("ec2:CreateTags", "ec2:DeleteTags")

# No resource-level permissions exist for these: "Resource": "*" is required.
UNSCOPED_ACTIONS = (
    "iam:ListOpenIDConnectProviders",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSecurityGroupRules",
    "ec2:DescribeTags",
)


# A Managed distribution and its origin access control, as the Terraform provider
# creates (CreateDistributionWithTags is authorised as CreateDistribution and
# TagResource), refreshes, updates, disables and deletes them.
CLOUDFRONT_DISTRIBUTION_ACTIONS = (
    "cloudfront:CreateDistribution",
    "cloudfront:GetDistribution",
    "cloudfront:GetDistributionConfig",
    "cloudfront:UpdateDistribution",
    "cloudfront:DeleteDistribution",
    "cloudfront:TagResource",
    "cloudfront:UntagResource",
    "cloudfront:ListTagsForResource",
)
CLOUDFRONT_OAC_ACTIONS = (
    "cloudfront:GetOriginAccessControl",
    "cloudfront:UpdateOriginAccessControl",
    "cloudfront:DeleteOriginAccessControl",
)
# CreateOriginAccessControl names no resource: AWS cannot scope it.
CLOUDFRONT_UNSCOPED_ACTIONS = ("cloudfront:CreateOriginAccessControl",)
# The alias record: read the zone's name, change and list its records, wait for the change.
ROUTE53_ZONE_ACTIONS = ("route53:GetHostedZone", "route53:ListResourceRecordSets")


@dataclass(frozen=True)
class CloudFrontHosting:
    """What issuers behind CloudFront the provider's credentials must serve (all optional)."""

    # The issuers' host names (spec.irsa.hosting.cloudFront.domain): their OIDC providers.
    domains: tuple[str, ...] = ()
    # Shared distributions' buckets: the two documents under any <namespace>/<cluster>.
    shared_buckets: tuple[str, ...] = ()
    # Managed: distributions and origin access controls (ids are AWS's: no name to scope by).
    managed: bool = False
    # Managed with hostedZoneId: the alias record of a domain above, in these zones only.
    hosted_zone_ids: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.domains or self.shared_buckets or self.managed or self.hosted_zone_ids)


def cloudfront_statements(
    hosting: CloudFrontHosting, *, partition: str = "aws", account_id: str = "*"
) -> list[dict[str, Any]]:
    """The statements an issuer behind CloudFront needs (none when ``hosting`` is empty).

    Raises:
        ValueError: CloudFront outside the aws partition, a record without a domain, or
            a malformed domain, bucket or zone.
    """
    if not hosting:
        return []
    if partition != "aws":
        msg = (
            f"CloudFront issuer hosting is not supported in {partition} (the function refuses "
            "it there): leave out the CloudFront options"
        )
        raise ValueError(msg)
    problem = _hosting_problem(hosting)
    if problem:
        raise ValueError(problem)
    iam = f"arn:{partition}:iam::{account_id}"
    statements: list[dict[str, Any]] = []
    if hosting.domains:
        statements.append(
            {
                "Sid": "CloudFrontIssuerOIDCProviders",
                "Effect": "Allow",
                "Action": list(OIDC_PROVIDER_ACTIONS),
                # https://<domain> and https://<domain>/<path>.
                "Resource": [
                    arn
                    for d in hosting.domains
                    for arn in (f"{iam}:oidc-provider/{d}", f"{iam}:oidc-provider/{d}/*")
                ],
            }
        )
    if hosting.shared_buckets:
        statements.append(
            {
                "Sid": "SharedDistributionDocuments",
                "Effect": "Allow",
                "Action": list(S3_OBJECT_ACTIONS),
                "Resource": [
                    f"arn:{partition}:s3:::{b}/*/{key}"
                    for b in hosting.shared_buckets
                    for key in (DISCOVERY_KEY, JWKS_KEY)
                ],
            }
        )
    if hosting.managed:
        cloudfront = f"arn:{partition}:cloudfront::{account_id}"
        statements += [
            {
                "Sid": "ManagedDistributions",
                "Effect": "Allow",
                "Action": list(CLOUDFRONT_DISTRIBUTION_ACTIONS),
                "Resource": f"{cloudfront}:distribution/*",
            },
            {
                "Sid": "ManagedOriginAccessControls",
                "Effect": "Allow",
                "Action": list(CLOUDFRONT_OAC_ACTIONS),
                "Resource": f"{cloudfront}:origin-access-control/*",
            },
            {
                "Sid": "CreateOriginAccessControls",
                "Effect": "Allow",
                "Action": list(CLOUDFRONT_UNSCOPED_ACTIONS),
                "Resource": "*",
            },
        ]
    if hosting.hosted_zone_ids:
        zones = [hosted_zone_arn(z, PARTITIONS[partition]) for z in hosting.hosted_zone_ids]
        statements += [
            {
                "Sid": "IssuerAliasRecords",
                "Effect": "Allow",
                "Action": "route53:ChangeResourceRecordSets",
                "Resource": zones,
                # Only the issuers' own names, only A records: nothing else in the zone.
                "Condition": {
                    "ForAllValues:StringEquals": {
                        "route53:ChangeResourceRecordSetsNormalizedRecordNames": list(
                            hosting.domains
                        ),
                        "route53:ChangeResourceRecordSetsRecordTypes": ["A"],
                    }
                },
            },
            {
                "Sid": "IssuerAliasZones",
                "Effect": "Allow",
                "Action": list(ROUTE53_ZONE_ACTIONS),
                "Resource": zones,
            },
            {
                "Sid": "IssuerAliasChanges",
                "Effect": "Allow",
                "Action": "route53:GetChange",
                "Resource": f"arn:{partition}:route53:::change/*",
            },
        ]
    return statements


def _hosting_problem(hosting: CloudFrontHosting) -> str | None:
    for domain in hosting.domains:
        if not ISSUER_DOMAIN.match(domain):
            return f"issuer domain {domain!r} is not a host name such as oidc.example.com"
    for bucket in hosting.shared_buckets:
        problem = s3_bucket_name_problem(bucket)
        if problem:
            return f"shared bucket {problem}"
    for zone in hosting.hosted_zone_ids:
        if not HOSTED_ZONE_ID.match(zone):
            return f"hosted zone id {zone!r} is not a Route 53 zone id such as Z0123456789ABC"
    served = hosting.shared_buckets or hosting.managed or hosting.hosted_zone_ids
    if served and not hosting.domains:
        return (
            "CloudFront issuer hosting needs the issuers' domains (--issuer-domain): the OIDC "
            "providers and alias records are scoped to them"
        )
    if hosting.hosted_zone_ids and not hosting.managed:
        return "a hosted zone is only used by Managed distributions (--managed-distributions)"
    return None


# The association's own calls (aws_eks_pod_identity_association: create, read, update,
# delete, tags). Create and List act on the cluster; the rest on the association, whose
# ARN is podidentityassociation/<cluster>/<association id>.
EKS_CLUSTER_ACTIONS = ("eks:CreatePodIdentityAssociation", "eks:ListPodIdentityAssociations")
EKS_ASSOCIATION_ACTIONS = (
    "eks:DescribePodIdentityAssociation",
    "eks:UpdatePodIdentityAssociation",
    "eks:DeletePodIdentityAssociation",
    "eks:TagResource",
    "eks:UntagResource",
    "eks:ListTagsForResource",
)
EKS_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")


def pod_identity_statements(
    clusters: tuple[str, ...], *, partition: str, account_id: str, role: str
) -> list[dict[str, Any]]:
    """EKS Pod Identity: the associations of ``clusters`` (EKS names) and passing ``role``.

    Nothing without clusters. Each name must be an EKS cluster name (no wildcard): the
    grant is on those clusters' associations only.
    """
    if not clusters:
        return []
    for name in clusters:
        if not EKS_CLUSTER_NAME.match(name):
            msg = (
                f"EKS cluster {name!r} is not an EKS cluster name (letters, digits, '-' and "
                "'_', at most 100; no wildcard)"
            )
            raise ValueError(msg)
    eks = f"arn:{partition}:eks:*:{account_id}"
    return [
        {
            "Sid": "PodIdentityAssociationsOfTheClusters",
            "Effect": "Allow",
            "Action": list(EKS_CLUSTER_ACTIONS),
            "Resource": [f"{eks}:cluster/{name}" for name in clusters],
        },
        {
            "Sid": "PodIdentityAssociations",
            "Effect": "Allow",
            "Action": list(EKS_ASSOCIATION_ACTIONS),
            "Resource": [f"{eks}:podidentityassociation/{name}/*" for name in clusters],
        },
        {
            "Sid": "PassAddonRolesToPodIdentity",
            "Effect": "Allow",
            "Action": "iam:PassRole",
            "Resource": role,
            "Condition": {"StringEquals": {"iam:PassedToService": POD_IDENTITY_SERVICE}},
        },
    ]


def default_bucket_prefix(name_prefix: str = "") -> str:
    """The prefix every derived issuer bucket starts with (see ``Names.bucket``)."""
    return f"{name_prefix}irsa-"


def default_role_prefix(name_prefix: str = "") -> str:
    """The prefix every derived role and policy name starts with (see ``Names.role``)."""
    return name_prefix


def provider_policy(
    *,
    bucket_prefix: str = "irsa-",
    role_prefix: str = "",
    partition: str = "aws",
    account_id: str = "*",
    cloudfront: CloudFrontHosting = CloudFrontHosting(),  # frozen: safe as a default
    eks_clusters: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The identity policy the provider's credentials need, as a JSON-ready dict.

    Args:
        bucket_prefix: Every issuer bucket name starts with it; also scopes the
            OIDC providers, whose ARN is ``oidc-provider/<bucket>.s3.<region>...``.
            It must be non-empty: an empty prefix would grant every bucket.
        role_prefix: Every role and customer-managed policy name starts with it
            (the step input's ``namePrefix``); may be empty.
        partition: ``aws``, ``aws-cn`` or ``aws-us-gov``.
        account_id: The 12-digit account, or ``*`` for whichever account the
            credentials belong to (IAM and EC2 ARNs always name their account).
        cloudfront: Issuers behind CloudFront to serve, if any (``cloudfront_statements``).
        eks_clusters: EKS clusters (their EKS names) whose add-ons use Pod Identity, if any
            (``pod_identity_statements``).

    Returns:
        The policy document (``Version`` and ``Statement``).

    Raises:
        ValueError: an unknown partition, a malformed account id, or an empty
            or wildcard bucket prefix.
    """
    if partition not in PARTITIONS:
        msg = f"partition must be one of {', '.join(PARTITIONS)}; got {partition!r}"
        raise ValueError(msg)
    if account_id != "*" and not (len(account_id) == 12 and account_id.isdigit()):
        msg = f"account id must be 12 digits or '*'; got {account_id!r}"
        raise ValueError(msg)
    for label, prefix in (("bucket prefix", bucket_prefix), ("role prefix", role_prefix)):
        if any(c in prefix for c in "*?/ "):
            msg = f"{label} {prefix!r} may not contain '*', '?', '/' or spaces"
            raise ValueError(msg)
    if not bucket_prefix:
        msg = "the bucket prefix must not be empty: it would grant every bucket in the account"
        raise ValueError(msg)

    p = PARTITIONS[partition]
    bucket = f"arn:{p.name}:s3:::{bucket_prefix}*"
    iam = f"arn:{p.name}:iam::{account_id}"
    role = f"{iam}:role{IAM_PATH}{role_prefix}*"
    our_policies = f"{iam}:policy{IAM_PATH}{role_prefix}*"
    ec2 = f"arn:{p.name}:ec2:*:{account_id}"
    attachable = [managed_policy_arn(path, p) for path in MANAGED_POLICIES] + [our_policies]

    statements: list[dict[str, Any]] = [
        {
            "Sid": "IssuerBuckets",
            "Effect": "Allow",
            "Action": list(S3_BUCKET_ACTIONS),
            "Resource": bucket,
        },
        {
            "Sid": "IssuerDiscoveryDocuments",
            "Effect": "Allow",
            "Action": list(S3_OBJECT_ACTIONS),
            "Resource": [f"{bucket}/{DISCOVERY_KEY}", f"{bucket}/{JWKS_KEY}"],
        },
        {
            "Sid": "IssuerOIDCProviders",
            "Effect": "Allow",
            "Action": list(OIDC_PROVIDER_ACTIONS),
            # The provider ARN is oidc-provider/<bucket>.s3.<region>.<suffix>.
            "Resource": f"{iam}:oidc-provider/{bucket_prefix}*",
        },
        {
            "Sid": "AddonRoles",
            "Effect": "Allow",
            "Action": list(IAM_ROLE_ACTIONS),
            "Resource": role,
        },
        {
            "Sid": "AddonRolePolicyAttachments",
            "Effect": "Allow",
            "Action": list(IAM_ATTACH_ACTIONS),
            "Resource": role,
            "Condition": {"ArnLike": {"iam:PolicyARN": attachable}},
        },
        {
            "Sid": "AddonPolicies",
            "Effect": "Allow",
            "Action": list(IAM_POLICY_ACTIONS),
            "Resource": our_policies,
        },
        {
            "Sid": "SecurityGroupIngressRules",
            "Effect": "Allow",
            "Action": list(EC2_RULE_ACTIONS),
            "Resource": [f"{ec2}:security-group/*", f"{ec2}:security-group-rule/*"],
        },
        {
            "Sid": "SecurityGroupRuleTags",
            "Effect": "Allow",
            "Action": list(EC2_TAG_ACTIONS),
            "Resource": f"{ec2}:security-group-rule/*",
        },
        {
            "Sid": "ListAndDescribeUnscoped",
            "Effect": "Allow",
            "Action": list(UNSCOPED_ACTIONS),
            "Resource": "*",
        },
    ]
    statements += cloudfront_statements(cloudfront, partition=partition, account_id=account_id)
    statements += pod_identity_statements(
        eks_clusters, partition=p.name, account_id=account_id, role=role
    )
    return {"Version": "2012-10-17", "Statement": statements}
