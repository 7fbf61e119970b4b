"""The self-hosted OIDC issuer: its two documents and where they are served from.

The issuer in one place at run time: the models of ``spec.irsa.hosting`` (and its
CloudFront), the nodes of each hosting, and the documents (the discovery document and
the JWKS, from the public half of CAPI's ``<cluster>-sa``; the private half is never
read). ``function/addons/irsa.py`` is the IRSA add-on that uses it (the OIDC provider's
trust, the webhook, the status); the ``issuer`` command (``function_tools/issuer.py``)
and the AWS checks (``function_tools/aws/issuer_checks.py``) read it.

Hostings (``spec.irsa.hosting``):

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

import base64
import functools
import hashlib
import json
import re
from enum import StrEnum
from typing import Any

from google.protobuf import struct_pb2
from pydantic import ConfigDict, Field, field_validator, model_validator

from function import public_keys, structs
from function.context import CallContext
from function.graph import Gate, MissingFactError, Node, Usage, Wait, after
from function.names import CLOUDFRONT_HOSTED_ZONE_ID, CLUSTER_TAG
from function.policies import (
    DISCOVERY_KEY,
    JWKS_KEY,
    STS_AUDIENCE,
    bucket_policy,
    cloudfront_bucket_policy,
)
from function.public_keys import KeyProblemError
from function.spec_base import (
    DNS_NAME_LABEL,
    HOSTED_ZONE_ID,
    REGION,
    StrictModel,
    check_hosted_zone_id,
    s3_bucket_name_problem,
)

# --- its place in the ClusterPlugin spec (function/spec.py frames it) ----------------


class HostingType(StrEnum):
    """Where a SelfHosted issuer's two discovery documents are served from."""

    S3_PUBLIC = "S3Public"
    CLOUD_FRONT = "CloudFront"


class DistributionMode(StrEnum):
    """Whose CloudFront distribution serves the documents."""

    SHARED = "Shared"
    MANAGED = "Managed"


class PriceClass(StrEnum):
    """A CloudFront price class (which edge locations serve the distribution)."""

    PRICE_CLASS_100 = "PriceClass_100"
    PRICE_CLASS_200 = "PriceClass_200"
    PRICE_CLASS_ALL = "PriceClass_All"


# A host name CloudFront can serve as an alias: lower-case DNS labels, at least two.
ISSUER_DOMAIN = re.compile(rf"^({DNS_NAME_LABEL}\.)+{DNS_NAME_LABEL}$")
ISSUER_DOMAIN_MAX = 253
# Path segments of URL-safe characters; none may start with '.', so '.', '..' and
# hidden names (which S3, CloudFront and IAM would each normalize their own way) are out.
PATH_SEGMENT = r"[A-Za-z0-9_~-][A-Za-z0-9._~-]*"
PATH_PREFIX = re.compile(rf"^{PATH_SEGMENT}(/{PATH_SEGMENT})*$")
PATH_PREFIX_MAX = 128
ACM_CERTIFICATE_ARN = re.compile(
    r"^arn:(aws|aws-cn|aws-us-gov):acm:([a-z0-9-]+):(\d{12}):certificate/([0-9a-f-]{1,64})$"
)
# CloudFront reads viewer certificates from ACM in us-east-1 only (whatever the origin's region).
CLOUDFRONT_CERTIFICATE_REGION = "us-east-1"
_CEL_CERTIFICATE = (
    "self == '' || self.matches('^arn:aws:acm:us-east-1:[0-9]{12}:certificate/[0-9a-f-]{1,64}$')"
)


def _unset(field: str) -> str:
    """CEL: ``field`` is absent or empty."""
    return f"(!has(self.{field}) || self.{field} == '')"


def _set(field: str) -> str:
    """CEL: ``field`` is present and not empty."""
    return f"(has(self.{field}) && self.{field} != '')"


class CloudFrontSpec(StrictModel):
    """The issuer's documents behind CloudFront, in a private bucket."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"self.distribution != 'Shared' || {_set('bucketName')}",
                    "message": "bucketName is required when distribution is Shared",
                },
                {
                    "rule": f"self.distribution != 'Managed' || {_set('certificateArn')}",
                    "message": "certificateArn is required when distribution is Managed",
                },
                {
                    "rule": f"self.distribution == 'Managed' || ({_unset('certificateArn')} && "
                    f"{_unset('hostedZoneId')} && !has(self.priceClass))",
                    "message": (
                        "certificateArn, hostedZoneId and priceClass are only allowed when "
                        "distribution is Managed"
                    ),
                },
                {
                    "rule": f"self.distribution == 'Shared' || ({_unset('bucketName')} && "
                    f"{_unset('bucketRegion')})",
                    "message": (
                        "bucketName and bucketRegion are only allowed when distribution is Shared"
                    ),
                },
            ]
        }
    )

    distribution: DistributionMode = Field(
        description=(
            "Shared: one distribution for many clusters, set up once by the platform team; the "
            "function writes only this cluster's two documents, under its own path, into the "
            "distribution's bucket (bucketName). Managed: this ClusterPlugin composes a private "
            "bucket, an origin access control and a distribution of its own (certificateArn; "
            "CloudFront takes about 15 minutes to deploy it)."
        ),
    )
    domain: str = Field(
        description=(
            "The host name the distribution serves, e.g. oidc.example.com: the issuer is "
            "https://<domain>[/<pathPrefix>]."
        ),
        json_schema_extra={
            "minLength": 1,
            "maxLength": ISSUER_DOMAIN_MAX,
            "pattern": ISSUER_DOMAIN.pattern,
        },
    )
    path_prefix: str = Field(
        default="",
        alias="pathPrefix",
        description=(
            "The issuer's path under the domain, without leading or trailing '/'. Shared: "
            "<namespace>/<cluster> of this ClusterPlugin, the only prefix it may write under "
            "(empty means that). Managed: empty (the issuer is https://<domain>), or any path."
        ),
        json_schema_extra={
            "maxLength": PATH_PREFIX_MAX,
            "pattern": f"^({PATH_SEGMENT}(/{PATH_SEGMENT})*)?$",
        },
    )
    bucket_name: str = Field(
        default="",
        alias="bucketName",
        description=(
            "Shared only (and required there): the platform team's private S3 bucket that is "
            "the distribution's origin, e.g. acme-oidc."
        ),
        json_schema_extra={"maxLength": 63, "pattern": "^([a-z0-9][a-z0-9-]{1,61}[a-z0-9])?$"},
    )
    bucket_region: str = Field(
        default="",
        alias="bucketRegion",
        description=(
            "Shared only: the region of bucketName, e.g. us-east-1. Empty: the cluster's region."
        ),
        json_schema_extra={"pattern": f"^({REGION.pattern.strip('^$')})?$"},
    )
    certificate_arn: str = Field(
        default="",
        alias="certificateArn",
        description=(
            "Managed only (and required there): an ACM certificate for domain, in us-east-1 "
            "(where CloudFront reads certificates), e.g. "
            "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-0a1b-0a1b-0a1b-0a1b2c3d4e5f."
        ),
        json_schema_extra={
            # Bounds the cost the API server estimates for the rule's regular expression.
            "maxLength": 128,
            "x-kubernetes-validations": [
                {
                    "rule": _CEL_CERTIFICATE,
                    "message": "certificateArn must be an ACM certificate ARN in us-east-1",
                }
            ]
        },
    )
    hosted_zone_id: str = Field(
        default="",
        alias="hostedZoneId",
        description=(
            "Managed only: a Route 53 hosted zone holding domain, e.g. Z0123456789ABC; the "
            "function then composes the alias record to the distribution. Empty: create the "
            "DNS record yourself (status.plugins says the distribution's domain name)."
        ),
        json_schema_extra={
            "maxLength": 32,
            "pattern": f"^({HOSTED_ZONE_ID.pattern.strip('^$')})?$",
        },
    )
    price_class: PriceClass | None = Field(
        default=None,
        alias="priceClass",
        description="Managed only: the distribution's price class. Unset: PriceClass_100.",
    )

    @field_validator("domain")
    @classmethod
    def _domain(cls, v: str) -> str:
        if len(v) > ISSUER_DOMAIN_MAX or not ISSUER_DOMAIN.match(v):
            msg = (
                f"{v[:64]!r} is not a host name such as oidc.example.com (lower-case letters, "
                f"digits and '-' in dot-separated labels, at most {ISSUER_DOMAIN_MAX} characters)"
            )
            raise ValueError(msg)
        return v

    @field_validator("path_prefix")
    @classmethod
    def _path_prefix(cls, v: str) -> str:
        if v and (len(v) > PATH_PREFIX_MAX or not PATH_PREFIX.match(v)):
            msg = (
                f"{v[:64]!r} is not a path such as team-a/demo: segments of letters, digits, "
                "'-', '_', '~' and '.' separated by single '/', none starting with '.', no "
                f"leading or trailing '/', at most {PATH_PREFIX_MAX} characters"
            )
            raise ValueError(msg)
        return v

    @field_validator("bucket_name")
    @classmethod
    def _bucket(cls, v: str) -> str:
        problem = s3_bucket_name_problem(v) if v else None
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("bucket_region")
    @classmethod
    def _bucket_region(cls, v: str) -> str:
        if v and not REGION.match(v):
            msg = f"{v!r} is not an AWS region such as us-east-1"
            raise ValueError(msg)
        return v

    @field_validator("certificate_arn")
    @classmethod
    def _certificate(cls, v: str) -> str:
        if not v:
            return v
        m = ACM_CERTIFICATE_ARN.match(v)
        if not m:
            msg = (
                f"{v[:96]!r} is not an ACM certificate ARN "
                "(arn:aws:acm:us-east-1:<account>:certificate/<id>)"
            )
            raise ValueError(msg)
        partition, region = m.group(1), m.group(2)
        if partition != "aws" or region != CLOUDFRONT_CERTIFICATE_REGION:
            where = region if partition == "aws" else f"partition {partition}"
            msg = (
                f"{v!r} is in {where}: CloudFront uses ACM certificates in "
                f"{CLOUDFRONT_CERTIFICATE_REGION} only; request or import the certificate for "
                "the domain there"
            )
            raise ValueError(msg)
        return v

    @field_validator("hosted_zone_id")
    @classmethod
    def _zone(cls, v: str) -> str:
        return check_hosted_zone_id(v) if v else v

    @model_validator(mode="after")
    def _distribution_fields(self) -> CloudFrontSpec:
        # "<field>: <message>" names the exact field (see _problem).
        shared = self.distribution is DistributionMode.SHARED
        if shared and not self.bucket_name:
            msg = (
                "bucketName: is required when distribution is Shared (the platform team's "
                "private bucket behind the distribution)"
            )
            raise ValueError(msg)
        if not shared and not self.certificate_arn:
            msg = (
                "certificateArn: is required when distribution is Managed (an ACM certificate "
                f"for {self.domain} in {CLOUDFRONT_CERTIFICATE_REGION})"
            )
            raise ValueError(msg)
        only = {
            DistributionMode.MANAGED: (
                ("certificateArn", self.certificate_arn),
                ("hostedZoneId", self.hosted_zone_id),
                ("priceClass", self.price_class),
            ),
            DistributionMode.SHARED: (
                ("bucketName", self.bucket_name),
                ("bucketRegion", self.bucket_region),
            ),
        }
        for mode, fields in only.items():
            for name, value in fields:
                if value and self.distribution is not mode:
                    msg = (
                        f"{name}: is only allowed when distribution is {mode.value} "
                        f"(distribution is {self.distribution.value})"
                    )
                    raise ValueError(msg)
        return self


class HostingSpec(StrictModel):
    """Where a SelfHosted issuer's discovery documents are served from."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.type) || self.type != 'CloudFront' || has(self.cloudFront)",
                    "message": "cloudFront is required when type is CloudFront",
                },
                {
                    "rule": "(has(self.type) && self.type == 'CloudFront') || "
                    "!has(self.cloudFront)",
                    "message": "cloudFront is only allowed when type is CloudFront",
                },
            ]
        }
    )

    type: HostingType = Field(
        default=HostingType.S3_PUBLIC,
        description=(
            "S3Public: a bucket whose policy lets anyone read the two documents (S3 Block "
            "Public Access must allow public bucket policies). CloudFront: a private bucket "
            "behind a CloudFront distribution (cloudFront), for accounts where Block Public "
            "Access is on."
        ),
    )
    cloud_front: CloudFrontSpec | None = Field(
        default=None,
        alias="cloudFront",
        description=(
            "type CloudFront only (and required there): the distribution and the issuer's "
            "domain. Example: cloudFront: {distribution: Shared, domain: oidc.example.com, "
            "bucketName: acme-oidc}."
        ),
    )

    @model_validator(mode="after")
    def _type_fields(self) -> HostingSpec:
        if self.type is HostingType.CLOUD_FRONT and self.cloud_front is None:
            msg = "cloudFront: is required when type is CloudFront"
            raise ValueError(msg)
        if self.type is not HostingType.CLOUD_FRONT and self.cloud_front is not None:
            msg = f"cloudFront: is only allowed when type is CloudFront (type is {self.type.value})"
            raise ValueError(msg)
        return self

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


def _tags(ctx: CallContext) -> dict[str, str]:
    return {CLUSTER_TAG: f"{ctx.facts.namespace}/{ctx.spec.cluster_name}"}


def _s3(ctx: CallContext, kind: str, for_provider: dict[str, Any]) -> dict[str, Any]:
    """A resource of the XR's own bucket."""
    return ctx.flavour.managed(
        kind, {"bucket": ctx.names.bucket, "region": ctx.region, **for_provider}
    )


# --- the XR's own bucket (S3Public and Managed) ------------------------------------------


def bucket(ctx: CallContext) -> dict[str, Any]:
    """The issuer bucket; its external name is the bucket name."""
    return ctx.flavour.managed(
        "Bucket", {"region": ctx.region, "tags": _tags(ctx)}, external_name=ctx.names.bucket
    )


def ownership(ctx: CallContext) -> dict[str, Any]:
    """ACLs off: access is decided by the bucket policy alone (OAC needs this too)."""
    return _s3(ctx, "BucketOwnershipControls", {"rule": {"objectOwnership": "BucketOwnerEnforced"}})


def _access_block(ctx: CallContext, *, public_policy: bool) -> dict[str, Any]:
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


def public_access(ctx: CallContext) -> dict[str, Any]:
    """S3Public: block ACL-based public access; allow the one public bucket policy."""
    return _access_block(ctx, public_policy=True)


def private_access(ctx: CallContext) -> dict[str, Any]:
    """Behind CloudFront: all four Block Public Access flags on."""
    return _access_block(ctx, public_policy=False)


def public_policy(ctx: CallContext) -> dict[str, Any]:
    """S3Public: public GetObject on the two discovery keys only; deny plain HTTP."""
    return _s3(ctx, "BucketPolicy", {"policy": bucket_policy(ctx.names.bucket, ctx.partition)})


def cloudfront_policy(ctx: CallContext) -> dict[str, Any]:
    """Managed: GetObject on the two documents for this distribution only; deny plain HTTP."""
    names = ctx.names
    keys = (names.issuer_key(DISCOVERY_KEY), names.issuer_key(JWKS_KEY))
    document = cloudfront_bucket_policy(
        names.bucket, keys, ctx.arn_of(DISTRIBUTION), ctx.partition
    )
    return _s3(ctx, "BucketPolicy", {"policy": document})


# --- the two documents ----------------------------------------------------------------


def _public_pem(ctx: CallContext) -> bytes:
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


def _key_problem(ctx: CallContext, err: KeyProblemError) -> Wait:
    secret = f"Secret {ctx.facts.namespace}/{ctx.names.sa_secret}"
    return Wait(secret, f"{secret}: {err}", blocked=True, reason=SA_SECRET_WAIT)


def sa_key_present(ctx: CallContext) -> Wait | None:
    """Gate: ``<cluster>-sa`` holds a usable public key; nothing is published before."""
    try:
        jwks_document(_public_pem(ctx))
    except MissingFactError as err:
        return err.wait
    except KeyProblemError as err:
        return _key_problem(ctx, err)
    return None


def _object(ctx: CallContext, key: str, content: str) -> dict[str, Any]:
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


def discovery(ctx: CallContext) -> dict[str, Any]:
    """The OpenID discovery document."""
    try:
        algorithms = jwks_algorithms(_public_pem(ctx))
    except KeyProblemError as err:
        raise MissingFactError(_key_problem(ctx, err)) from err
    return _object(ctx, DISCOVERY_KEY, discovery_document(ctx.issuer_url(), algorithms))


def jwks(ctx: CallContext) -> dict[str, Any]:
    """The JWKS built from ``<cluster>-sa``'s public key."""
    try:
        return _object(ctx, JWKS_KEY, jwks_document(_public_pem(ctx)))
    except KeyProblemError as err:
        raise MissingFactError(_key_problem(ctx, err)) from err


def oidc_provider(ctx: CallContext) -> dict[str, Any]:
    """The IAM OIDC provider for the issuer; IAM trusts the public CA of S3's and ACM's TLS."""
    return ctx.flavour.managed(
        "OpenIDConnectProvider",
        {"url": ctx.issuer_url(), "clientIdList": [STS_AUDIENCE], "tags": _tags(ctx)},
    )


# crossplane/upjet#632, #722: provider-aws can lose track of an object it created (races of
# its async create with other writers of the managed resource), so the resource has no
# external-name while IAM holds the provider; each later create fails with EntityAlreadyExists
# and it never turns Synced. Seen once in this project's CI (moto, provider-aws v2.5.0).
_ALREADY_EXISTS = "EntityAlreadyExists"


def stuck_oidc_provider(observed: struct_pb2.Struct) -> str:
    """What to do about an OIDC provider the provider keeps creating, or "" (Node.diagnose)."""
    if _ALREADY_EXISTS not in structs.failing_message(observed):
        return ""
    url = structs.str_at(observed, "spec", "forProvider", "url") or ""
    return (
        f"IAM already has an OIDC provider for {url} and the provider, with no ARN for it, "
        "retries the create forever (Synced=False: EntityAlreadyExists; crossplane/upjet#632): "
        "if it is this cluster's, adopt it with kubectl annotate "
        f"{structs.kubectl_ref(observed, 'OpenIDConnectProvider')} crossplane.io/external-name="
        f"arn:<partition>:iam::<account-id>:oidc-provider/{url.removeprefix('https://')}"
    )


# --- CloudFront (Managed) ----------------------------------------------------------------


def _at_provider(ctx: CallContext, node: str, field: str, what: str) -> str:
    """``status.atProvider.<field>`` of an observed node, or wait for it."""
    obj = ctx.observed.get(node)
    value = None if obj is None else structs.str_at(obj, "status", "atProvider", field)
    if not value:
        message = f"{node} reports no status.atProvider.{field} ({what}) yet"
        label = f"{node} {'ARN' if field == 'arn' else field}"
        raise MissingFactError(Wait(label, message, reason=label))
    return value


def origin_access_control(ctx: CallContext) -> dict[str, Any]:
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


def distribution(ctx: CallContext) -> dict[str, Any]:
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


def distribution_domain(ctx: CallContext) -> str:
    """The distribution's own host name (``dXXXX.cloudfront.net``), once observed."""
    return _at_provider(ctx, DISTRIBUTION, "domainName", "its cloudfront.net host name")


def dns_record(ctx: CallContext) -> dict[str, Any]:
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
    def gate(ctx: CallContext) -> Wait | None:
        try:
            _at_provider(ctx, node, "arn", what)
        except MissingFactError as err:
            return err.wait
        return None

    gate.__name__ = f"arn_known({node})"
    return gate


def _domain_known(ctx: CallContext) -> Wait | None:
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
    Node(
        OIDC_PROVIDER,
        oidc_provider,
        (after(DISCOVERY, JWKS, BUCKET_POLICY),),
        diagnose=stuck_oidc_provider,
    ),
)

# The bucket is the platform team's: only this cluster's two documents are written.
SHARED = (
    Node(DISCOVERY, discovery, (sa_key_present,)),
    Node(JWKS, jwks, (sa_key_present,)),
    Node(OIDC_PROVIDER, oidc_provider, (after(DISCOVERY, JWKS),), diagnose=stuck_oidc_provider),
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
    Node(
        OIDC_PROVIDER,
        oidc_provider,
        (after(DISTRIBUTION, BUCKET_POLICY, DISCOVERY, JWKS),),
        diagnose=stuck_oidc_provider,
    ),
)
MANAGED_WITH_RECORD = (
    *_MANAGED_BEFORE_RECORD,
    Node(DNS_RECORD, dns_record, (_domain_known,)),
    Node(
        OIDC_PROVIDER,
        oidc_provider,
        (after(DISTRIBUTION, BUCKET_POLICY, DISCOVERY, JWKS, DNS_RECORD),),
        diagnose=stuck_oidc_provider,
    ),
)


def nodes(ctx: CallContext) -> tuple[Node, ...]:
    """The issuer's nodes for the XR's hosting."""
    cloudfront = ctx.spec.irsa.cloud_front
    if cloudfront is None:
        return S3_PUBLIC
    if cloudfront.distribution is DistributionMode.SHARED:
        return SHARED
    return MANAGED_WITH_RECORD if cloudfront.hosted_zone_id else MANAGED


def dns_note(ctx: CallContext) -> str:
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


# --- the two documents: discovery and JWKS ---------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(n: int) -> str:
    return _b64url(n.to_bytes((n.bit_length() + 7) // 8 or 1, "big"))


@functools.lru_cache(maxsize=256)  # per issuer: it never changes for an XR
def discovery_document(issuer_url: str, algorithms: tuple[str, ...] = ("RS256",)) -> str:
    """The ``.well-known/openid-configuration`` document, as compact JSON.

    ``algorithms`` are those of the keys the JWKS publishes, nothing more.
    """
    doc = {
        "issuer": issuer_url,
        "jwks_uri": f"{issuer_url}/keys.json",
        "authorization_endpoint": "urn:kubernetes:programmatic_authorization",
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": list(algorithms),
        "claims_supported": ["sub", "iss"],
    }
    return json.dumps(doc, separators=(",", ":"))


@functools.lru_cache(maxsize=256)
def jwks_algorithms(public_pem: bytes) -> tuple[str, ...]:
    """The signing algorithms of the keys in ``jwks_document(public_pem)``."""
    return tuple(k["alg"] for k in json.loads(jwks_document(public_pem))["keys"])


@functools.lru_cache(maxsize=256)
def jwks_document(public_pem: bytes) -> str:
    """The JWKS (``keys.json``) for a PEM public key or certificate, as compact JSON.

    The ``kid`` is base64url(SHA-256(DER SubjectPublicKeyInfo)), as kube-apiserver
    computes it, so tokens' ``kid`` headers match. Cached by key: it changes only
    when the cluster's key pair does.
    """
    key = public_keys.load_public_key(public_pem)
    kid = _b64url(hashlib.sha256(key.spki_der()).digest())
    if isinstance(key, public_keys.RSAKey):
        if key.n.bit_length() < 2048:
            msg = f"the RSA key has {key.n.bit_length()} bits; STS needs at least 2048"
            raise KeyProblemError(msg)
        jwk = {"use": "sig", "kty": "RSA", "kid": kid, "alg": "RS256"}
        jwk |= {"n": _uint(key.n), "e": _uint(key.e)}
    else:
        jwk = {"use": "sig", "kty": "EC", "kid": kid, "alg": "ES256", "crv": "P-256"}
        jwk |= {"x": _b64url(key.x.to_bytes(32, "big")), "y": _b64url(key.y.to_bytes(32, "big"))}
    return json.dumps({"keys": [jwk]}, separators=(",", ":"))
