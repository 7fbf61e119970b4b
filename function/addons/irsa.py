"""The self-hosted OIDC issuer and the pod identity webhook.

Emitted only for SelfHosted IRSA when an add-on needs an IAM role. Where the two
discovery documents are served from (a public-read bucket, or a private one behind
CloudFront) is ``oidc_issuer``'s; this module adds the webhook and says what the
issuer is to the other add-ons. Every add-on role trusts the OIDC provider
(``provider_arn``, ``oidc_ready``), and every add-on with a role starts after the
webhook (``webhook_ready``), which injects its credentials.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import ConfigDict, Field, field_validator, model_validator

from function.addons import ccm, oidc_issuer
from function.addons.kit import cni
from function.addons.kit.helm import release
from function.addons.oidc_issuer import CloudFrontSpec, DistributionMode, HostingSpec
from function.cluster import KUBEADM_CONTROL_PLANE, control_plane_name
from function.context import CallContext, external_issuer, issuer_url
from function.graph import (
    Addon,
    ConditionOut,
    MissingFactError,
    Plugin,
    Release,
    Usage,
    Wait,
    after,
    eks_or_unread,
)
from function.policies import STS_AUDIENCE
from function.spec_base import (
    S3_RESERVED_PREFIXES,
    S3_RESERVED_SUFFIXES,
    IRSAMode,
    StrictModel,
    cel_refuse_affixes,
    s3_bucket_name_problem,
)

# --- its place in the ClusterPlugin spec (function/spec.py frames it) ----------------


class CertManagerMode(StrEnum):
    """Whether the function installs cert-manager for the pod identity webhook."""

    INSTALL = "Install"
    EXISTING = "Existing"


class PodIdentityWebhookSpec(StrictModel):
    """The amazon-eks-pod-identity-webhook (needed on non-EKS clusters)."""

    install: bool = Field(
        default=True,
        description=(
            "Install the webhook (charts.podIdentityWebhook), which injects the role's "
            "credentials into pods; false if the cluster already runs one."
        ),
    )
    cert_manager: CertManagerMode = Field(
        default=CertManagerMode.INSTALL,
        alias="certManager",
        description=(
            "Where the webhook's certificate issuer comes from: Install cert-manager "
            "(charts.certManager), or use the cert-manager that is Existing in the cluster."
        ),
    )


class IRSASpec(StrictModel):
    """IAM Roles for Service Accounts."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "(has(self.issuerURL) && self.issuerURL != '') == "
                    "(has(self.oidcProviderARN) && self.oidcProviderARN != '')",
                    "message": (
                        "issuerURL and oidcProviderARN are given together (or, on EKS, both "
                        "left out: read from the AWSManagedControlPlane)"
                    ),
                },
                {
                    "rule": "(has(self.mode) && self.mode == 'External') || "
                    "((!has(self.issuerURL) || self.issuerURL == '') && "
                    "(!has(self.oidcProviderARN) || self.oidcProviderARN == ''))",
                    "message": (
                        "issuerURL and oidcProviderARN are only allowed when mode is External"
                    ),
                },
                {
                    "rule": "!has(self.bucketName) || self.bucketName == '' || "
                    "!has(self.mode) || self.mode == 'SelfHosted'",
                    "message": "bucketName is only allowed when mode is SelfHosted",
                },
                {
                    "rule": "!has(self.hosting) || !has(self.mode) || self.mode == 'SelfHosted'",
                    "message": "hosting is only allowed when mode is SelfHosted",
                },
                {
                    "rule": "!has(self.bucketName) || self.bucketName == '' || "
                    "!has(self.hosting) || !has(self.hosting.cloudFront) || "
                    "self.hosting.cloudFront.distribution != 'Shared'",
                    "message": (
                        "bucketName is not used with a Shared CloudFront distribution: the "
                        "documents go to hosting.cloudFront.bucketName"
                    ),
                },
            ]
        }
    )

    mode: IRSAMode = Field(
        default=IRSAMode.SELF_HOSTED,
        description=(
            "Where the OIDC issuer comes from. SelfHosted: the function publishes the discovery "
            "document and JWKS (from the Cluster's <cluster>-sa Secret) in an S3 bucket and "
            "creates the IAM OIDC provider. External: an existing issuer, given by issuerURL "
            "and oidcProviderARN, or on EKS (AWSManagedControlPlane with "
            "associateOIDCProvider: true) left out and read from the control plane's "
            "status.oidcProvider. PodIdentity (EKS only, not in China regions): EKS Pod "
            "Identity instead of IRSA: each add-on role trusts pods.eks.amazonaws.com for its "
            "one service account of this cluster, through a PodIdentityAssociation; the "
            "eks-pod-identity-agent runs first (charts.podIdentityAgent, or the "
            "AWSManagedControlPlane's spec.addons). Disabled: no IRSA; add-ons use node "
            "credentials."
        ),
    )
    bucket_name: str = Field(
        default="",
        alias="bucketName",
        description=(
            "SelfHosted only: the issuer's S3 bucket instead of the derived one, e.g. "
            "acme-irsa-demo. 3 to 63 lower-case letters, digits and '-' (no dots: a dotted "
            "bucket breaks the TLS certificate of the virtual-hosted issuer URL)."
        ),
        json_schema_extra={
            "maxLength": 63,
            "pattern": "^([a-z0-9][a-z0-9-]{1,61}[a-z0-9])?$",
            "x-kubernetes-validations": [
                {
                    "rule": cel_refuse_affixes(S3_RESERVED_PREFIXES, S3_RESERVED_SUFFIXES),
                    "message": "bucketName uses a prefix or suffix S3 reserves",
                }
            ],
        },
    )
    issuer_url: str = Field(
        default="",
        alias="issuerURL",
        description=(
            "External only, with oidcProviderARN: the service-account issuer URL, e.g. "
            "https://oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE. On EKS leave both out: "
            "CAPA's status.oidcProvider.arn names them (a given value must agree with it)."
        ),
    )
    oidc_provider_arn: str = Field(
        default="",
        alias="oidcProviderARN",
        description=(
            "External only, with issuerURL: the ARN of the IAM OIDC provider for "
            "issuerURL, e.g. arn:aws:iam::123456789012:oidc-provider/"
            "oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE."
        ),
    )
    pod_identity_webhook: PodIdentityWebhookSpec = Field(
        default_factory=PodIdentityWebhookSpec,
        alias="podIdentityWebhook",
        description=(
            "The amazon-eks-pod-identity-webhook, which gives pods of an IRSA ServiceAccount "
            "their role's credentials (EKS runs its own; other clusters need it)."
        ),
    )
    hosting: HostingSpec | None = Field(
        default=None,
        description=(
            "SelfHosted only: where the two discovery documents are served from. Unset: "
            "type S3Public (a public-read bucket policy). Where S3 Block Public Access forbids "
            "that, type CloudFront serves them from a private bucket. Example: hosting: {type: "
            "CloudFront, cloudFront: {distribution: Shared, domain: oidc.example.com, "
            "bucketName: acme-oidc}}."
        ),
    )

    @field_validator("bucket_name")
    @classmethod
    def _bucket(cls, v: str) -> str:
        if v:
            problem = s3_bucket_name_problem(v)
            if problem:
                raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _mode_fields(self) -> IRSASpec:
        # "<field>: <message>" names the exact field (see _problem).
        external = self.mode is IRSAMode.EXTERNAL
        given = (("issuerURL", self.issuer_url), ("oidcProviderARN", self.oidc_provider_arn))
        for (name, value), (other, other_value) in zip(given, reversed(given), strict=True):
            if external and other_value and not value:
                msg = (
                    f"{name}: is required with {other} (or leave both out on EKS: they are "
                    "read from the AWSManagedControlPlane's status.oidcProvider)"
                )
                raise ValueError(msg)
            if not external and value:
                msg = f"{name}: is only allowed when mode is External (mode is {self.mode.value})"
                raise ValueError(msg)
        if self.bucket_name and self.mode is not IRSAMode.SELF_HOSTED:
            msg = f"bucketName: is only allowed when mode is SelfHosted (mode is {self.mode.value})"
            raise ValueError(msg)
        if self.hosting is not None and self.mode is not IRSAMode.SELF_HOSTED:
            msg = f"hosting: is only allowed when mode is SelfHosted (mode is {self.mode.value})"
            raise ValueError(msg)
        cloud_front = self.cloud_front
        if self.bucket_name and cloud_front and cloud_front.distribution is DistributionMode.SHARED:
            msg = (
                "bucketName: is not used with a Shared CloudFront distribution: the documents "
                "go to hosting.cloudFront.bucketName (the platform team's bucket)"
            )
            raise ValueError(msg)
        return self

    @property
    def cloud_front(self) -> CloudFrontSpec | None:
        """The CloudFront hosting, when the issuer is hosted behind CloudFront."""
        return None if self.hosting is None else self.hosting.cloud_front

# The issuer's own nodes are declared in oidc_issuer (by hosting type); the
# other add-ons name the OIDC provider through this module.
OIDC_PROVIDER = oidc_issuer.OIDC_PROVIDER
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


def cert_manager(ctx: CallContext) -> dict[str, Any]:
    """cert-manager, with its CRDs, for the webhook's serving certificate."""
    return release(ctx, CERT_MANAGER, values={"crds": {"enabled": True}})


def webhook(ctx: CallContext) -> dict[str, Any]:
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


def plugin(ctx: CallContext) -> Plugin | None:
    """The issuer plugin, when SelfHosted IRSA serves at least one add-on."""
    if not ctx.hosts_issuer:
        return None
    issuer = oidc_issuer.nodes(ctx)
    note = oidc_issuer.dns_note(ctx) if ctx.names.cloudfront is not None else ""
    if not webhook_installed(ctx):
        return Plugin(ADDON.name, issuer, note=note)
    if ctx.spec.irsa.pod_identity_webhook.cert_manager is CertManagerMode.INSTALL:
        nodes = (*issuer, _CERT_MANAGER_NODE, _WEBHOOK_AFTER_CERT_MANAGER)
        return Plugin(ADDON.name, nodes, note=note)
    return Plugin(ADDON.name, (*issuer, _WEBHOOK_ALONE), note=note)


def provider_arn(ctx: CallContext) -> str:
    """The IAM OIDC provider's ARN (SelfHosted: observed; External: given, or CAPA's on EKS)."""
    if ctx.irsa is IRSAMode.EXTERNAL:
        return ctx.external_issuer()[1]
    arn = ctx.observed.arn(OIDC_PROVIDER)
    if not arn:
        raise MissingFactError(Wait(f"{OIDC_PROVIDER} ARN", "the OIDC provider has no ARN yet"))
    return arn


_PROVIDER_READY = after(OIDC_PROVIDER)


def oidc_ready(ctx: CallContext) -> Wait | None:
    """Gate: the OIDC provider exists (SelfHosted), or is given or CAPA reports it (External)."""
    if ctx.irsa is IRSAMode.SELF_HOSTED:
        return _PROVIDER_READY(ctx)
    if ctx.irsa is IRSAMode.EXTERNAL:
        try:
            ctx.external_issuer()
        except MissingFactError as missing:
            return missing.wait
    return None


def webhook_installed(ctx: CallContext) -> bool:
    """Whether this XR installs the pod identity webhook."""
    return ctx.hosts_issuer and ctx.spec.irsa.pod_identity_webhook.install


_WEBHOOK_READY = after(WEBHOOK.node)


def webhook_ready(ctx: CallContext) -> Wait | None:
    """Gate: the pod identity webhook is ready, when this XR installs it.

    Pods only get IRSA credentials if the webhook mutates them at creation, so an
    add-on started before it would silently run on the node's role.
    """
    if not webhook_installed(ctx):
        return None
    return _WEBHOOK_READY(ctx)


# The condition saying whether the API server signs with the issuer the roles trust.
CONDITION = "IssuerReady"
# What kubeadm's API server signs with when the KubeadmControlPlane names no issuer.
KUBEADM_DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"
API_SERVER_ARGS = "spec.kubeadmConfigSpec.clusterConfiguration.apiServer.extraArgs"


def issuer_mismatch(
    signing: str | None, trusted: str, control_plane: str, mode: IRSAMode
) -> tuple[str, str] | None:
    """Why the roles refuse the API server's tokens, naming both issuers, and the fix; or None.

    ``signing``: the KubeadmControlPlane's --service-account-issuer (None: unset, kubeadm's
    default); ``trusted``: the issuer the add-on roles trust. The tokens carry the first
    issuer the API server has, and STS accepts them only from the issuer of the OIDC
    provider the roles trust: another one leaves every resource Ready and no add-on able
    to reach AWS.
    """
    if signing is not None and signing.rstrip("/") == trusted.rstrip("/"):
        return None
    said = (
        f"starts the API server with --service-account-issuer={signing}"
        if signing
        else "sets no --service-account-issuer, so the API server signs with kubeadm's default "
        + KUBEADM_DEFAULT_ISSUER
    )
    fix = (
        f"set service-account-issuer to {trusted}, first, in its {API_SERVER_ARGS} "
        "(function-cluster-plugin issuer prints the patch; the control plane rolls out)"
    )
    if mode is IRSAMode.EXTERNAL:
        fix = f"give spec.irsa.issuerURL (and oidcProviderARN) the API server's issuer, or {fix}"
    problem = (
        f"KubeadmControlPlane {control_plane} {said}, but the add-on roles trust {trusted}: "
        "STS refuses the tokens of every add-on"
    )
    return problem, fix


def condition(ctx: CallContext, _phases: Mapping[str, str]) -> ConditionOut:
    """IssuerReady: the API server signs tokens with the issuer the add-on roles trust."""
    facts = ctx.facts
    if not ctx.wants_irsa or ctx.irsa in (IRSAMode.DISABLED, IRSAMode.POD_IDENTITY):
        return ConditionOut(
            CONDITION, "True", "NotRequired", "no add-on role trusts a service-account issuer"
        )
    first = eks_or_unread(
        CONDITION, facts, ("ManagedByEKS", "EKS signs the tokens with the cluster's issuer")
    )
    if first is not None:
        return first
    if facts.control_plane_kind != KUBEADM_CONTROL_PLANE:
        return ConditionOut(
            CONDITION,
            "Unknown",
            "NotChecked",
            f"the control plane is a {facts.control_plane_kind}: only a KubeadmControlPlane's "
            "--service-account-issuer is read",
        )
    region = ctx.spec.region or facts.region or ""
    # An S3Public issuer is in the region; one behind CloudFront is not.
    unplaced = ctx.hosts_issuer and not region and ctx.names.cloudfront is None
    trusted = "" if unplaced else issuer_url(ctx.spec, ctx.names, region, facts)
    if not trusted:
        return ConditionOut(
            CONDITION, "Unknown", "IssuerUnknown", "the issuer the roles trust is not known yet"
        )
    where = control_plane_name(facts)
    problem = issuer_mismatch(facts.service_account_issuer, trusted, where, ctx.irsa)
    if problem:
        reason = "IssuerMismatch" if facts.service_account_issuer else "IssuerNotSet"
        message = f"{problem[0]}; {problem[1]}"
        return ConditionOut(CONDITION, "False", reason, message, event="Warning")
    return ConditionOut(
        CONDITION,
        "True",
        "Matches",
        f"KubeadmControlPlane {where} signs with {trusted}, the issuer the add-on roles trust",
    )


def status(ctx: CallContext) -> Mapping[str, Any]:
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
    extra_releases=(CERT_MANAGER, WEBHOOK),
    status=status,
    condition=condition,
    usages=(
        cni.needed_by(CERT_MANAGER.node, "pods of cert-manager need the CNI until they are gone"),
        cni.needed_by(
            WEBHOOK.node, "pods of the pod identity webhook need the CNI until they are gone"
        ),
        Usage(WEBHOOK.node, CERT_MANAGER.node, "the webhook's certificate comes from cert-manager"),
        *oidc_issuer.USAGES,
    ),
)
