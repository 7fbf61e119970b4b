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
- security-group ingress rules (and their tags).

Not granted, on purpose:

- ``iam:PassRole``: no AWS service is ever handed one of these roles (no
  EC2 instance profile, Lambda, EKS or similar). Pods assume them through
  ``sts:AssumeRoleWithWebIdentity``, which the role's trust policy authorises,
  not the identity that created the role.
- ``iam:CreateServiceLinkedRole``, ``s3:PutBucketAcl``, ``s3:PutObjectAcl``:
  nothing composed needs them (ACLs are disabled with BucketOwnerEnforced).
- ``sts:GetCallerIdentity`` (the provider calls it at start-up) needs no grant:
  AWS always allows it.

Most IAM, S3 and EC2 actions here support resource-level permissions; the
statements that must use ``"Resource": "*"`` are the List/Describe calls AWS
does not scope (``iam:ListOpenIDConnectProviders``, ``ec2:Describe*`` below).
"""

from __future__ import annotations

from typing import Any

from function.names import IAM_PATH, PARTITIONS
from function.policies import DISCOVERY_KEY, JWKS_KEY, managed_policy_arn
from function.registry import MANAGED_POLICIES

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
    return {"Version": "2012-10-17", "Statement": statements}
