"""Where the self-hosted issuer's two documents are served from (``spec.irsa.hosting``).

- S3Public (the default): a bucket of the XR's whose policy lets anyone read the
  discovery document and the JWKS; Block Public Access must allow that policy.
- CloudFront Shared: the platform team's private bucket behind its distribution;
  the XR writes only its two documents under its own ``<namespace>/<cluster>``.
- CloudFront Managed: a private bucket of the XR's, an origin access control and a
  distribution serving ``https://<domain>``; the bucket policy lets only that
  distribution read the two documents, and it can only be written once the
  distribution's ARN is known. An optional Route 53 alias points the domain at it.

In every mode the IAM OIDC provider comes last, once STS can fetch both
documents (IAM may fetch them itself when the provider is created); the JWKS is
computed from the public half of ``<cluster>-sa``.
"""

from __future__ import annotations

from typing import Any

from function import structs
from function.graph import Ctx, Gate, MissingFactError, Node, Usage, Wait, after
from function.names import CLOUDFRONT_HOSTED_ZONE_ID, CLUSTER_TAG
from function.oidc import KeyProblemError, discovery_document, jwks_algorithms, jwks_document
from function.policies import (
    DISCOVERY_KEY,
    JWKS_KEY,
    STS_AUDIENCE,
    bucket_policy,
    cloudfront_bucket_policy,
)
from function.spec import DistributionMode, PriceClass

SA_SECRET_WAIT = "service-account key Secret"  # noqa: S105  # a wait label, not a secret

BUCKET = "irsa-bucket"
BUCKET_OWNERSHIP = "irsa-bucket-ownership"
BUCKET_PUBLIC_ACCESS = "irsa-bucket-public-access"
BUCKET_POLICY = "irsa-bucket-policy"
DISCOVERY = "irsa-discovery"
JWKS = "irsa-jwks"
OIDC_PROVIDER = "irsa-oidc-provider"
ORIGIN_ACCESS_CONTROL = "irsa-origin-access-control"
DISTRIBUTION = "irsa-distribution"
DNS_RECORD = "irsa-dns-record"

# The AWS-managed cache policy CachingDisabled: a cached JWKS would outlive a key
# rotation, and CachePolicies are limited to 20 per account (never one per cluster).
CACHING_DISABLED = "4135ea2d-6df8-44a3-9df3-4b5a84be39ad"
DEFAULT_PRICE_CLASS = PriceClass.PRICE_CLASS_100
ORIGIN_ID = "irsa-bucket"
DISTRIBUTION_SLOW = "CloudFront takes about 15 minutes to deploy a new distribution"


def _tags(ctx: Ctx) -> dict[str, str]:
    return {CLUSTER_TAG: f"{ctx.facts.namespace}/{ctx.spec.cluster_name}"}


def _s3(ctx: Ctx, kind: str, for_provider: dict[str, Any]) -> dict[str, Any]:
    """A resource of the XR's own bucket."""
    return ctx.flavour.managed(
        kind, {"bucket": ctx.names.bucket, "region": ctx.region, **for_provider}
    )


# --- the XR's own bucket (S3Public and Managed) ------------------------------------------


def bucket(ctx: Ctx) -> dict[str, Any]:
    """The issuer bucket; its external name is the bucket name."""
    return ctx.flavour.managed(
        "Bucket", {"region": ctx.region, "tags": _tags(ctx)}, external_name=ctx.names.bucket
    )


def ownership(ctx: Ctx) -> dict[str, Any]:
    """ACLs off: access is decided by the bucket policy alone (OAC needs this too)."""
    return _s3(ctx, "BucketOwnershipControls", {"rule": {"objectOwnership": "BucketOwnerEnforced"}})


def _access_block(ctx: Ctx, *, public_policy: bool) -> dict[str, Any]:
    # ACLs can never make anything public; policies may only where the one public
    # bucket policy (S3Public) needs it.
    return _s3(
        ctx,
        "BucketPublicAccessBlock",
        {
            "blockPublicAcls": True,
            "ignorePublicAcls": True,
            "blockPublicPolicy": not public_policy,
            "restrictPublicBuckets": not public_policy,
        },
    )


def public_access(ctx: Ctx) -> dict[str, Any]:
    """S3Public: block ACL-based public access; allow the one public bucket policy."""
    return _access_block(ctx, public_policy=True)


def private_access(ctx: Ctx) -> dict[str, Any]:
    """Behind CloudFront: all four Block Public Access flags on."""
    return _access_block(ctx, public_policy=False)


def public_policy(ctx: Ctx) -> dict[str, Any]:
    """S3Public: public GetObject on the two discovery keys only; deny plain HTTP."""
    return _s3(ctx, "BucketPolicy", {"policy": bucket_policy(ctx.names.bucket, ctx.partition)})


def cloudfront_policy(ctx: Ctx) -> dict[str, Any]:
    """Managed: GetObject on the two documents for this distribution only; deny plain HTTP."""
    names = ctx.names
    keys = (names.issuer_key(DISCOVERY_KEY), names.issuer_key(JWKS_KEY))
    document = cloudfront_bucket_policy(
        names.bucket, keys, ctx.arn_of(DISTRIBUTION), ctx.partition
    )
    return _s3(ctx, "BucketPolicy", {"policy": document})


# --- the two documents ----------------------------------------------------------------


def _public_pem(ctx: Ctx) -> bytes:
    facts = ctx.facts
    secret = f"Secret {facts.namespace}/{ctx.names.sa_secret}"
    if facts.sa_problem:
        raise MissingFactError(
            Wait(secret, f"{secret}: {facts.sa_problem}", blocked=True, reason=SA_SECRET_WAIT)
        )
    if facts.sa_public_pem is None:
        raise MissingFactError(
            Wait(
                secret,
                f"{secret} (CAPI's service-account key pair) has not been read yet",
                reason=SA_SECRET_WAIT,
            )
        )
    return facts.sa_public_pem


def _key_problem(ctx: Ctx, err: KeyProblemError) -> Wait:
    secret = f"Secret {ctx.facts.namespace}/{ctx.names.sa_secret}"
    return Wait(secret, f"{secret}: {err}", blocked=True, reason=SA_SECRET_WAIT)


def sa_key_present(ctx: Ctx) -> Wait | None:
    """Gate: ``<cluster>-sa`` holds a usable public key; nothing is published before."""
    try:
        jwks_document(_public_pem(ctx))
    except MissingFactError as err:
        return err.wait
    except KeyProblemError as err:
        return _key_problem(ctx, err)
    return None


def _object(ctx: Ctx, key: str, content: str) -> dict[str, Any]:
    names = ctx.names
    cloudfront = names.cloudfront
    # A Shared distribution's bucket is the platform team's, possibly in another region.
    region = (cloudfront.bucket_region if cloudfront is not None else "") or ctx.region
    return ctx.flavour.managed(
        "Object",
        {
            "bucket": names.issuer_bucket,
            "region": region,
            "key": names.issuer_key(key),
            "content": content,
            "contentType": "application/json",
            # STS caches keys itself; a short max-age keeps key rotation quick.
            "cacheControl": "max-age=300",
            "tags": _tags(ctx),
        },
    )


def discovery(ctx: Ctx) -> dict[str, Any]:
    """The OpenID discovery document."""
    try:
        algorithms = jwks_algorithms(_public_pem(ctx))
    except KeyProblemError as err:
        raise MissingFactError(_key_problem(ctx, err)) from err
    return _object(ctx, DISCOVERY_KEY, discovery_document(ctx.issuer_url(), algorithms))


def jwks(ctx: Ctx) -> dict[str, Any]:
    """The JWKS built from ``<cluster>-sa``'s public key."""
    try:
        return _object(ctx, JWKS_KEY, jwks_document(_public_pem(ctx)))
    except KeyProblemError as err:
        raise MissingFactError(_key_problem(ctx, err)) from err


def oidc_provider(ctx: Ctx) -> dict[str, Any]:
    """The IAM OIDC provider for the issuer; IAM trusts the public CA of S3's and ACM's TLS."""
    return ctx.flavour.managed(
        "OpenIDConnectProvider",
        {"url": ctx.issuer_url(), "clientIdList": [STS_AUDIENCE], "tags": _tags(ctx)},
    )


# --- CloudFront (Managed) ----------------------------------------------------------------


def _at_provider(ctx: Ctx, node: str, field: str, what: str) -> str:
    """``status.atProvider.<field>`` of an observed node, or wait for it."""
    obj = ctx.observed.get(node)
    value = None if obj is None else structs.str_at(obj, "status", "atProvider", field)
    if not value:
        message = f"{node} reports no status.atProvider.{field} ({what}) yet"
        label = f"{node} {'ARN' if field == 'arn' else field}"
        raise MissingFactError(Wait(label, message, reason=label))
    return value


def origin_access_control(ctx: Ctx) -> dict[str, Any]:
    """Lets the distribution sign its requests to the private bucket (SigV4, always)."""
    return ctx.flavour.managed(
        "OriginAccessControl",
        {
            "name": ctx.names.origin_access_control,
            "description": f"IRSA issuer of {ctx.facts.namespace}/{ctx.spec.cluster_name}",
            "originAccessControlOriginType": "s3",
            "signingBehavior": "always",
            "signingProtocol": "sigv4",
        },
    )


def distribution(ctx: Ctx) -> dict[str, Any]:
    """The distribution serving ``https://<domain>`` from the private bucket, GET/HEAD only."""
    cloudfront = ctx.spec.irsa.cloud_front
    if cloudfront is None:  # the Managed nodes are only planned with it
        msg = "a Managed distribution without spec.irsa.hosting.cloudFront"
        raise ValueError(msg)
    oac = _at_provider(ctx, ORIGIN_ACCESS_CONTROL, "id", "the origin access control's id")
    # The bucket's REST endpoint (never its website endpoint): OAC signs for S3 itself.
    origin = f"{ctx.names.bucket}.s3.{ctx.region}.{ctx.partition.dns_suffix}"
    methods = ["GET", "HEAD"]
    return ctx.flavour.managed(
        "Distribution",
        {
            "enabled": True,
            "comment": f"IRSA issuer of {ctx.facts.namespace}/{ctx.spec.cluster_name}",
            "aliases": [cloudfront.domain],
            "origin": [
                {"originId": ORIGIN_ID, "domainName": origin, "originAccessControlId": oac}
            ],
            "defaultCacheBehavior": {
                "targetOriginId": ORIGIN_ID,
                "allowedMethods": methods,
                "cachedMethods": methods,
                "viewerProtocolPolicy": "https-only",
                "cachePolicyId": CACHING_DISABLED,
            },
            "restrictions": {"geoRestriction": {"restrictionType": "none"}},
            "viewerCertificate": {
                "acmCertificateArn": cloudfront.certificate_arn,
                "sslSupportMethod": "sni-only",
                "minimumProtocolVersion": "TLSv1.2_2021",
            },
            "priceClass": (cloudfront.price_class or DEFAULT_PRICE_CLASS).value,
            # Ready only once Deployed: the OIDC provider must not be created before.
            "waitForDeployment": True,
            "tags": _tags(ctx),
        },
    )


def distribution_domain(ctx: Ctx) -> str:
    """The distribution's own host name (``dXXXX.cloudfront.net``), once observed."""
    return _at_provider(ctx, DISTRIBUTION, "domainName", "its cloudfront.net host name")


def dns_record(ctx: Ctx) -> dict[str, Any]:
    """The Route 53 alias of the domain to the distribution (IPv4: STS fetches over IPv4)."""
    cloudfront = ctx.spec.irsa.cloud_front
    if cloudfront is None:
        msg = "a DNS record without spec.irsa.hosting.cloudFront"
        raise ValueError(msg)
    return ctx.flavour.managed(
        "Record",
        {
            "zoneId": cloudfront.hosted_zone_id,
            "name": cloudfront.domain,
            "type": "A",
            "alias": {
                "name": distribution_domain(ctx),
                "zoneId": CLOUDFRONT_HOSTED_ZONE_ID,
                "evaluateTargetHealth": False,
            },
        },
    )


def _arn_known(node: str, what: str) -> Gate:
    def gate(ctx: Ctx) -> Wait | None:
        try:
            _at_provider(ctx, node, "arn", what)
        except MissingFactError as err:
            return err.wait
        return None

    gate.__name__ = f"arn_known({node})"
    return gate


def _domain_known(ctx: Ctx) -> Wait | None:
    try:
        distribution_domain(ctx)
    except MissingFactError as err:
        return err.wait
    return None


# --- the node sets ------------------------------------------------------------------------

_S3_BUCKET = (
    Node(BUCKET, bucket),
    Node(BUCKET_OWNERSHIP, ownership),
)
_OBJECTS_IN_OWN_BUCKET = (
    Node(DISCOVERY, discovery, (after(BUCKET), sa_key_present)),
    Node(JWKS, jwks, (after(BUCKET), sa_key_present)),
)

S3_PUBLIC = (
    *_S3_BUCKET,
    Node(BUCKET_PUBLIC_ACCESS, public_access),
    Node(BUCKET_POLICY, public_policy, (after(BUCKET_PUBLIC_ACCESS),)),
    *_OBJECTS_IN_OWN_BUCKET,
    # Roles are useless until STS can read both documents, so the provider
    # (and with it every role) waits for the public-read policy too.
    Node(OIDC_PROVIDER, oidc_provider, (after(DISCOVERY, JWKS, BUCKET_POLICY),)),
)

# The bucket is the platform team's: only this cluster's two documents are written.
SHARED = (
    Node(DISCOVERY, discovery, (sa_key_present,)),
    Node(JWKS, jwks, (sa_key_present,)),
    Node(OIDC_PROVIDER, oidc_provider, (after(DISCOVERY, JWKS),)),
)

_PRIVATE_BUCKET = after(BUCKET, BUCKET_OWNERSHIP, BUCKET_PUBLIC_ACCESS)
_MANAGED_BEFORE_RECORD = (
    *_S3_BUCKET,
    Node(BUCKET_PUBLIC_ACCESS, private_access),
    Node(ORIGIN_ACCESS_CONTROL, origin_access_control, (_PRIVATE_BUCKET,)),
    Node(
        DISTRIBUTION,
        distribution,
        (_PRIVATE_BUCKET, after(ORIGIN_ACCESS_CONTROL)),
        slow=DISTRIBUTION_SLOW,
    ),
    Node(
        BUCKET_POLICY,
        cloudfront_policy,
        (after(BUCKET_PUBLIC_ACCESS), _arn_known(DISTRIBUTION, "its ARN, for the bucket policy")),
    ),
    *_OBJECTS_IN_OWN_BUCKET,
)
# IAM may fetch the issuer when the provider is created: everything that serves it first.
MANAGED = (
    *_MANAGED_BEFORE_RECORD,
    Node(OIDC_PROVIDER, oidc_provider, (after(DISTRIBUTION, BUCKET_POLICY, DISCOVERY, JWKS),)),
)
MANAGED_WITH_RECORD = (
    *_MANAGED_BEFORE_RECORD,
    Node(DNS_RECORD, dns_record, (_domain_known,)),
    Node(
        OIDC_PROVIDER,
        oidc_provider,
        (after(DISTRIBUTION, BUCKET_POLICY, DISCOVERY, JWKS, DNS_RECORD),),
    ),
)


def nodes(ctx: Ctx) -> tuple[Node, ...]:
    """The issuer's nodes for the XR's hosting."""
    cloudfront = ctx.spec.irsa.cloud_front
    if cloudfront is None:
        return S3_PUBLIC
    if cloudfront.distribution is DistributionMode.SHARED:
        return SHARED
    return MANAGED_WITH_RECORD if cloudfront.hosted_zone_id else MANAGED


def dns_note(ctx: Ctx) -> str:
    """Managed without a hosted zone: where the user must point the domain (once known)."""
    cloudfront = ctx.spec.irsa.cloud_front
    if cloudfront is None or cloudfront.distribution is not DistributionMode.MANAGED:
        return ""
    if cloudfront.hosted_zone_id:
        return ""
    obj = ctx.observed.get(DISTRIBUTION)
    target = None if obj is None else structs.str_at(obj, "status", "atProvider", "domainName")
    if not target:
        return ""
    return (
        f"point {cloudfront.domain} at {target} (a Route 53 alias, or a CNAME): no "
        "hostedZoneId is set, so the function composes no DNS record"
    )


USAGES = (
    Usage(DISCOVERY, BUCKET, "a bucket holding objects cannot be deleted"),
    Usage(JWKS, BUCKET, "a bucket holding objects cannot be deleted"),
    # The issuer keeps being served until nothing trusts or publishes it any more.
    Usage(OIDC_PROVIDER, DISTRIBUTION, "IAM may fetch the issuer through the distribution"),
    Usage(DISCOVERY, DISTRIBUTION, "the distribution serves this document"),
    Usage(JWKS, DISTRIBUTION, "the distribution serves this document"),
    Usage(DNS_RECORD, DISTRIBUTION, "the record aliases the distribution"),
    Usage(DISTRIBUTION, ORIGIN_ACCESS_CONTROL, "an origin access control in use cannot be deleted"),
    Usage(DISTRIBUTION, BUCKET, "the distribution's origin is this bucket"),
)
