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


@functools.cache
def _lbc_policy_aws() -> str:
    raw = resources.files("function.data").joinpath("aws-load-balancer-controller-iam_policy.json")
    # Minified it is ~5.2k characters, under the 6,144 limit of a managed policy.
    return _compact(json.loads(raw.read_text()))


@functools.lru_cache(maxsize=4)
def lbc_policy(partition: Partition) -> str:
    """The AWS Load Balancer Controller policy (upstream v3.5.0) for ``partition``."""
    doc = _lbc_policy_aws()
    if partition.name == "aws":
        return doc
    return doc.replace('"arn:aws:', f'"arn:{partition.name}:')


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
