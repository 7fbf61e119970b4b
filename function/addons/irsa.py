"""The self-hosted OIDC issuer and the pod identity webhook.

Emitted only for SelfHosted IRSA when an add-on needs an IAM role. Where the two
discovery documents are served from (a public-read bucket, or a private one behind
CloudFront) is ``issuer_hosting``'s; this module adds the webhook and says what the
issuer is to the other add-ons. Every add-on role trusts the OIDC provider
(``provider_arn``, ``oidc_ready``), and every add-on with a role starts after the
webhook (``webhook_ready``), which injects its credentials.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from function.addons import ccm, cni, issuer_hosting
from function.addons.helm import release
from function.graph import (
    Addon,
    Ctx,
    MissingFactError,
    Plugin,
    Release,
    Usage,
    Wait,
    after,
    external_issuer,
)
from function.policies import STS_AUDIENCE
from function.spec import CertManagerMode, IRSAMode

# The issuer's own nodes are declared in issuer_hosting (by hosting type); the
# other add-ons name the OIDC provider through this module.
OIDC_PROVIDER = issuer_hosting.OIDC_PROVIDER
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


_CERT_MANAGER_NODE = CERT_MANAGER.as_node(cert_manager, (cni.ready, ccm.ready))
_WEBHOOK_AFTER_CERT_MANAGER = WEBHOOK.as_node(
    webhook, (cni.ready, ccm.ready, after(CERT_MANAGER.node))
)
_WEBHOOK_ALONE = WEBHOOK.as_node(webhook, (cni.ready, ccm.ready))


def plugin(ctx: Ctx) -> Plugin | None:
    """The issuer plugin, when SelfHosted IRSA serves at least one add-on."""
    if not ctx.hosts_issuer:
        return None
    issuer = issuer_hosting.nodes(ctx)
    note = issuer_hosting.dns_note(ctx) if ctx.names.cloudfront is not None else ""
    if not webhook_installed(ctx):
        return Plugin(ADDON.name, issuer, note=note)
    if ctx.spec.irsa.pod_identity_webhook.cert_manager is CertManagerMode.INSTALL:
        nodes = (*issuer, _CERT_MANAGER_NODE, _WEBHOOK_AFTER_CERT_MANAGER)
        return Plugin(ADDON.name, nodes, note=note)
    return Plugin(ADDON.name, (*issuer, _WEBHOOK_ALONE), note=note)


def provider_arn(ctx: Ctx) -> str:
    """The IAM OIDC provider's ARN (SelfHosted: observed; External: given, or CAPA's on EKS)."""
    if ctx.irsa is IRSAMode.EXTERNAL:
        return ctx.external_issuer()[1]
    arn = ctx.observed.arn(OIDC_PROVIDER)
    if not arn:
        raise MissingFactError(Wait(f"{OIDC_PROVIDER} ARN", "the OIDC provider has no ARN yet"))
    return arn


_PROVIDER_READY = after(OIDC_PROVIDER)


def oidc_ready(ctx: Ctx) -> Wait | None:
    """Gate: the OIDC provider exists (SelfHosted), or is given or CAPA reports it (External)."""
    if ctx.irsa is IRSAMode.SELF_HOSTED:
        return _PROVIDER_READY(ctx)
    if ctx.irsa is IRSAMode.EXTERNAL:
        try:
            ctx.external_issuer()
        except MissingFactError as missing:
            return missing.wait
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
        found = external_issuer(ctx.spec, ctx.facts)
        if found is not None:
            out["issuerURL"], out["oidcProviderARN"] = found
    elif ctx.hosts_issuer:
        region = ctx.spec.region or ctx.facts.region
        # A CloudFront issuer does not depend on the region.
        if region or ctx.names.cloudfront is not None:
            out["issuerURL"] = ctx.names.issuer_url(region or "")
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
        *issuer_hosting.USAGES,
    ),
)
