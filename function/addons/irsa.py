"""The self-hosted OIDC issuer (S3 + IAM OIDC provider) and the pod identity webhook.

Emitted only for SelfHosted IRSA when an add-on needs an IAM role. The bucket
is private except for the public read of the two discovery documents; the
JWKS is computed from the public half of ``<cluster>-sa``.
"""

from __future__ import annotations

from typing import Any

from function.addons.helm import release
from function.graph import (
    Addon,
    Ctx,
    MissingFactError,
    Node,
    Plugin,
    Wait,
    after,
    ccm_ready,
    cni_ready,
    webhook_installed,
)
from function.oidc import KeyProblemError, discovery_document, jwks_algorithms, jwks_document
from function.policies import DISCOVERY_KEY, JWKS_KEY, STS_AUDIENCE, bucket_policy
from function.spec import CertManagerMode, IRSAMode

PLUGIN = "irsa"
CERT_MANAGER_NAMESPACE = "cert-manager"
WEBHOOK_NAMESPACE = "kube-system"
SA_SECRET_WAIT = "service-account key Secret"  # noqa: S105  # a wait label, not a secret


def _tags(ctx: Ctx) -> dict[str, str]:
    return {"clusterplugin.dev/cluster": f"{ctx.facts.namespace}/{ctx.spec.cluster_name}"}


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
    return release(
        ctx,
        chart=ctx.step.charts.cert_manager,
        version=None,
        namespace=CERT_MANAGER_NAMESPACE,
        release_name="cert-manager",
        values={"crds": {"enabled": True}},
        wait=True,
    )


def webhook(ctx: Ctx) -> dict[str, Any]:
    """amazon-eks-pod-identity-webhook (jkroepke chart) with a cert-manager certificate."""
    return release(
        ctx,
        chart=ctx.step.charts.pod_identity_webhook,
        version=None,
        namespace=WEBHOOK_NAMESPACE,
        release_name="pod-identity-webhook",
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
        wait=True,
    )


def plugin(ctx: Ctx) -> Plugin | None:
    """The issuer plugin, when SelfHosted IRSA serves at least one add-on."""
    if ctx.irsa is not IRSAMode.SELF_HOSTED or not ctx.spec.wants_aws:
        return None
    nodes = [
        Node("irsa-bucket", bucket),
        Node("irsa-bucket-ownership", ownership),
        Node("irsa-bucket-public-access", public_access),
        Node("irsa-bucket-policy", policy, (after("irsa-bucket-public-access"),)),
        Node("irsa-discovery", discovery, (after("irsa-bucket"), sa_key_present)),
        Node("irsa-jwks", jwks, (after("irsa-bucket"), sa_key_present)),
        # Roles are useless until STS can read both documents, so the provider
        # (and with it every role) waits for the public-read policy too.
        Node(
            "irsa-oidc-provider",
            oidc_provider,
            (after("irsa-discovery", "irsa-jwks", "irsa-bucket-policy"),),
        ),
    ]
    if webhook_installed(ctx):
        installs_cert_manager = (
            ctx.spec.irsa.pod_identity_webhook.cert_manager is CertManagerMode.INSTALL
        )
        if installs_cert_manager:
            nodes.append(Node("cert-manager-release", cert_manager, (cni_ready, ccm_ready)))
        nodes.append(
            Node(
                "pod-identity-webhook-release",
                webhook,
                (cni_ready, ccm_ready, after("cert-manager-release"))
                if installs_cert_manager
                else (cni_ready, ccm_ready),
            )
        )
    return Plugin(PLUGIN, tuple(nodes))


ADDON = Addon(
    plugin,
    usages=(
        (
            "cert-manager-release",
            "cni-release",
            "pods of cert-manager need the CNI until they are gone",
        ),
        (
            "pod-identity-webhook-release",
            "cni-release",
            "pods of the pod identity webhook need the CNI until they are gone",
        ),
        (
            "pod-identity-webhook-release",
            "cert-manager-release",
            "the webhook's certificate comes from cert-manager",
        ),
        ("irsa-discovery", "irsa-bucket", "a bucket holding objects cannot be deleted"),
        ("irsa-jwks", "irsa-bucket", "a bucket holding objects cannot be deleted"),
    ),
)
