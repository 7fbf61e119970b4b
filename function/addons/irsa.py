"""The self-hosted OIDC issuer (S3 + IAM OIDC provider) and the pod identity webhook.

Emitted only for SelfHosted IRSA when an add-on needs an IAM role. The bucket
is private except for the public read of the two discovery documents; the
JWKS is computed from the public half of ``<cluster>-sa``. Every add-on role
trusts the OIDC provider (``provider_arn``, ``oidc_ready``), and every add-on
with a role starts after the webhook (``webhook_ready``), which injects its
credentials.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from function.addons import ccm, cni
from function.addons.helm import release
from function.graph import (
    Addon,
    Ctx,
    MissingFactError,
    Node,
    Plugin,
    Release,
    Usage,
    Wait,
    after,
)
from function.names import CLUSTER_TAG
from function.oidc import KeyProblemError, discovery_document, jwks_algorithms, jwks_document
from function.policies import DISCOVERY_KEY, JWKS_KEY, STS_AUDIENCE, bucket_policy
from function.spec import CertManagerMode, IRSAMode

SA_SECRET_WAIT = "service-account key Secret"  # noqa: S105  # a wait label, not a secret

BUCKET = "irsa-bucket"
BUCKET_OWNERSHIP = "irsa-bucket-ownership"
BUCKET_PUBLIC_ACCESS = "irsa-bucket-public-access"
BUCKET_POLICY = "irsa-bucket-policy"
DISCOVERY = "irsa-discovery"
JWKS = "irsa-jwks"
OIDC_PROVIDER = "irsa-oidc-provider"
CERT_MANAGER = Release(
    "cert-manager-release",
    lambda charts: charts.cert_manager,
    namespace="cert-manager",
    name="cert-manager",
    wait=True,
)
WEBHOOK = Release(
    "pod-identity-webhook-release",
    lambda charts: charts.pod_identity_webhook,
    namespace="kube-system",
    name="pod-identity-webhook",
    wait=True,
)


def _tags(ctx: Ctx) -> dict[str, str]:
    return {CLUSTER_TAG: f"{ctx.facts.namespace}/{ctx.spec.cluster_name}"}


def _s3(ctx: Ctx, kind: str, for_provider: dict[str, Any]) -> dict[str, Any]:
    return ctx.flavour.managed(
        kind, {"bucket": ctx.names.bucket, "region": ctx.region, **for_provider}
    )


def bucket(ctx: Ctx) -> dict[str, Any]:
    """The issuer bucket; its external name is the bucket name."""
    return ctx.flavour.managed(
        "Bucket", {"region": ctx.region, "tags": _tags(ctx)}, external_name=ctx.names.bucket
    )


def ownership(ctx: Ctx) -> dict[str, Any]:
    """ACLs off: access is decided by the bucket policy alone."""
    return _s3(ctx, "BucketOwnershipControls", {"rule": {"objectOwnership": "BucketOwnerEnforced"}})


def public_access(ctx: Ctx) -> dict[str, Any]:
    """Block ACL-based public access; allow the one public bucket policy."""
    return _s3(
        ctx,
        "BucketPublicAccessBlock",
        {
            "blockPublicAcls": True,
            "ignorePublicAcls": True,
            "blockPublicPolicy": False,
            "restrictPublicBuckets": False,
        },
    )


def policy(ctx: Ctx) -> dict[str, Any]:
    """Public GetObject on the two discovery keys only; deny plain HTTP."""
    return _s3(ctx, "BucketPolicy", {"policy": bucket_policy(ctx.names.bucket, ctx.partition)})


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


def sa_key_present(ctx: Ctx) -> Wait | None:
    """Gate: ``<cluster>-sa`` holds a usable public key; nothing is published before."""
    try:
        jwks_document(_public_pem(ctx))
    except MissingFactError as err:
        return err.wait
    except KeyProblemError as err:
        secret = f"Secret {ctx.facts.namespace}/{ctx.names.sa_secret}"
        return Wait(secret, f"{secret}: {err}", blocked=True, reason=SA_SECRET_WAIT)
    return None


def _object(ctx: Ctx, key: str, content: str) -> dict[str, Any]:
    return _s3(
        ctx,
        "Object",
        {
            "key": key,
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
        secret = f"Secret {ctx.facts.namespace}/{ctx.names.sa_secret}"
        raise MissingFactError(
            Wait(secret, f"{secret}: {err}", blocked=True, reason=SA_SECRET_WAIT)
        ) from err
    return _object(ctx, DISCOVERY_KEY, discovery_document(ctx.issuer_url(), algorithms))


def jwks(ctx: Ctx) -> dict[str, Any]:
    """The JWKS built from ``<cluster>-sa``'s public key."""
    try:
        return _object(ctx, JWKS_KEY, jwks_document(_public_pem(ctx)))
    except KeyProblemError as err:
        secret = f"Secret {ctx.facts.namespace}/{ctx.names.sa_secret}"
        raise MissingFactError(
            Wait(secret, f"{secret}: {err}", blocked=True, reason=SA_SECRET_WAIT)
        ) from err


def oidc_provider(ctx: Ctx) -> dict[str, Any]:
    """The IAM OIDC provider for the issuer; AWS ignores thumbprints for S3-hosted JWKS."""
    return ctx.flavour.managed(
        "OpenIDConnectProvider",
        {"url": ctx.issuer_url(), "clientIdList": [STS_AUDIENCE], "tags": _tags(ctx)},
    )


def cert_manager(ctx: Ctx) -> dict[str, Any]:
    """cert-manager, with its CRDs, for the webhook's serving certificate."""
    return release(ctx, CERT_MANAGER, values={"crds": {"enabled": True}})


def webhook(ctx: Ctx) -> dict[str, Any]:
    """amazon-eks-pod-identity-webhook (jkroepke chart) with a cert-manager certificate."""
    return release(
        ctx,
        WEBHOOK,
        values={
            "config": {
                "defaultAwsRegion": ctx.region,
                "tokenAudience": STS_AUDIENCE,
                "stsRegionalEndpoint": True,
            },
            "pki": {"certManager": {"enabled": True}},
            # Upstream's choice: a webhook outage must not stop every pod in the
            # cluster (including its own replacement) from being created.
            "mutatingWebhook": {"failurePolicy": "Ignore"},
        },
    )


_ISSUER_NODES = (
    Node(BUCKET, bucket),
    Node(BUCKET_OWNERSHIP, ownership),
    Node(BUCKET_PUBLIC_ACCESS, public_access),
    Node(BUCKET_POLICY, policy, (after(BUCKET_PUBLIC_ACCESS),)),
    Node(DISCOVERY, discovery, (after(BUCKET), sa_key_present)),
    Node(JWKS, jwks, (after(BUCKET), sa_key_present)),
    # Roles are useless until STS can read both documents, so the provider
    # (and with it every role) waits for the public-read policy too.
    Node(OIDC_PROVIDER, oidc_provider, (after(DISCOVERY, JWKS, BUCKET_POLICY),)),
)
_CERT_MANAGER_NODE = Node(CERT_MANAGER.node, cert_manager, (cni.ready, ccm.ready))
_WEBHOOK_AFTER_CERT_MANAGER = Node(
    WEBHOOK.node, webhook, (cni.ready, ccm.ready, after(CERT_MANAGER.node))
)
_WEBHOOK_ALONE = Node(WEBHOOK.node, webhook, (cni.ready, ccm.ready))


def plugin(ctx: Ctx) -> Plugin | None:
    """The issuer plugin, when SelfHosted IRSA serves at least one add-on."""
    if not ctx.hosts_issuer:
        return None
    if not webhook_installed(ctx):
        return Plugin(ADDON.name, _ISSUER_NODES)
    if ctx.spec.irsa.pod_identity_webhook.cert_manager is CertManagerMode.INSTALL:
        return Plugin(ADDON.name, (*_ISSUER_NODES, _CERT_MANAGER_NODE, _WEBHOOK_AFTER_CERT_MANAGER))
    return Plugin(ADDON.name, (*_ISSUER_NODES, _WEBHOOK_ALONE))


def provider_arn(ctx: Ctx) -> str:
    """The IAM OIDC provider's ARN (SelfHosted: observed; External: given)."""
    if ctx.irsa is IRSAMode.EXTERNAL:
        return ctx.spec.irsa.oidc_provider_arn
    arn = ctx.observed.arn(OIDC_PROVIDER)
    if not arn:
        raise MissingFactError(Wait(f"{OIDC_PROVIDER} ARN", "the OIDC provider has no ARN yet"))
    return arn


_PROVIDER_READY = after(OIDC_PROVIDER)


def oidc_ready(ctx: Ctx) -> Wait | None:
    """Gate: the IAM OIDC provider exists (SelfHosted) or was given (External)."""
    if ctx.irsa is IRSAMode.SELF_HOSTED:
        return _PROVIDER_READY(ctx)
    return None


def webhook_installed(ctx: Ctx) -> bool:
    """Whether this XR installs the pod identity webhook."""
    return ctx.hosts_issuer and ctx.spec.irsa.pod_identity_webhook.install


_WEBHOOK_READY = after(WEBHOOK.node)


def webhook_ready(ctx: Ctx) -> Wait | None:
    """Gate: the pod identity webhook is ready, when this XR installs it.

    Pods only get IRSA credentials if the webhook mutates them at creation, so an
    add-on started before it would silently run on the node's role.
    """
    if not webhook_installed(ctx):
        return None
    return _WEBHOOK_READY(ctx)


def status(ctx: Ctx) -> Mapping[str, Any]:
    """status.issuerURL and status.oidcProviderARN, once known."""
    out: dict[str, Any] = {}
    if ctx.irsa is IRSAMode.EXTERNAL:
        out["issuerURL"] = ctx.issuer_url()
        out["oidcProviderARN"] = ctx.spec.irsa.oidc_provider_arn
    elif ctx.hosts_issuer:
        region = ctx.spec.region or ctx.facts.region
        if region:
            out["issuerURL"] = ctx.names.issuer_url(region)
        arn = ctx.observed.arn(OIDC_PROVIDER)
        if arn:
            out["oidcProviderARN"] = arn
    return out


ADDON = Addon(
    "irsa",
    plugin,
    title="the IRSA issuer",
    status=status,
    usages=(
        cni.needed_by(CERT_MANAGER.node, "pods of cert-manager need the CNI until they are gone"),
        cni.needed_by(
            WEBHOOK.node, "pods of the pod identity webhook need the CNI until they are gone"
        ),
        Usage(WEBHOOK.node, CERT_MANAGER.node, "the webhook's certificate comes from cert-manager"),
        Usage(DISCOVERY, BUCKET, "a bucket holding objects cannot be deleted"),
        Usage(JWKS, BUCKET, "a bucket holding objects cannot be deleted"),
    ),
)
