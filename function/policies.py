"""IAM and S3 policy documents: built once per distinct input, always compact JSON.

Security properties held here (and tested):
- a trust policy names exactly one OIDC provider, one service account and the
  ``sts.amazonaws.com`` audience (StringEquals, no wildcards);
- the only ``*`` principal is the public read of the two discovery documents,
  plus a Deny of plain-HTTP access.
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
                {
                    "Sid": "DenyInsecureTransport",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:*",
                    "Resource": [arn, f"{arn}/*"],
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                },
            ],
        }
    )


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
