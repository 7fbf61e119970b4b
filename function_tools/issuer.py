"""``issuer``: the SelfHosted IRSA issuer URL, and the KubeadmControlPlane change it needs.

The kube-apiserver signs service-account tokens with ``--service-account-issuer``
from its first boot, so the URL must be in the cluster template before the
cluster is created. It is a pure function of the XR (and the step input's
``namePrefix``): ``Names(prefix, namespace, clusterName, irsa.bucketName)
.issuer_url(region)``, the same computation the function uses for
``status.issuerURL``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from function import accept, registry
from function.context import external_issuer, issuer_url
from function.spec_base import InvalidInputError, IRSAMode
from function_tools import resolve

STS_AUDIENCE = "sts.amazonaws.com"
KUBEADM_DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"
KCP_GROUP = "controlplane.cluster.x-k8s.io"


class IssuerError(Exception):
    """The XR has no issuer to print, or not enough is known to compute it."""


@dataclass
class Issuer:
    """The issuer of one ClusterPlugin."""

    mode: IRSAMode
    url: str
    namespace: str
    cluster: str
    region: str | None = None
    region_source: str = ""
    bucket: str | None = None
    oidc_provider_arn: str | None = None
    warnings: list[str] = field(default_factory=list)
    # Behind CloudFront: spec.irsa.hosting as the function reads it (type, distribution...).
    hosting: dict[str, str] | None = None

    def extra_args_v1beta2(self) -> list[dict[str, str]]:
        """KCP v1beta2 ``apiServer.extraArgs``: a list of name/value pairs."""
        return [
            {"name": "service-account-issuer", "value": self.url},
            {"name": "api-audiences", "value": STS_AUDIENCE},
        ]

    def extra_args_v1beta1(self) -> dict[str, str]:
        """KCP v1beta1 ``apiServer.extraArgs``: a map (one value per flag)."""
        return {"service-account-issuer": self.url, "api-audiences": STS_AUDIENCE}

    def patch(self, version: str) -> dict[str, Any]:
        """The KubeadmControlPlane fragment to merge into the cluster template."""
        args: Any = self.extra_args_v1beta2() if version == "v1beta2" else self.extra_args_v1beta1()
        return {
            "apiVersion": f"{KCP_GROUP}/{version}",
            "kind": "KubeadmControlPlane",
            "spec": {
                "kubeadmConfigSpec": {"clusterConfiguration": {"apiServer": {"extraArgs": args}}}
            },
        }

    def notes(self) -> list[str]:
        """What to know when applying the patch."""
        if self.mode is not IRSAMode.SELF_HOSTED:
            return []
        keep = "Keep the other extraArgs you have (cloud-provider: external, ...)."
        migrate = (
            "To migrate a cluster whose tokens were issued by kubeadm's default issuer, keep "
            f"{KUBEADM_DEFAULT_ISSUER} as a second service-account-issuer entry after this "
            "one until the old tokens have expired: the first issuer signs new tokens, all of "
            "them are accepted. Only the v1beta2 list form can repeat a flag; the v1beta1 map "
            "holds one value per flag."
        )
        audiences = (
            "api-audiences replaces the default audience (the issuer URL); the webhook-injected "
            f"tokens ask for {STS_AUDIENCE} themselves. If something in the cluster validates "
            "tokens for the default audience, list both, comma-separated: "
            f"{self.url},{STS_AUDIENCE}."
        )
        keys = (
            "The function publishes the JWKS from the <cluster>-sa Secret (CAPI's "
            "service-account key pair): keep the service-account key files kubeadm uses by default."
        )
        return [keep, migrate, audiences, keys, *self._hosting_notes()]

    def _hosting_notes(self) -> list[str]:
        hosting = self.hosting
        if hosting is None:
            return []
        if hosting["distribution"] == "Shared":
            shared = (
                f"The platform team's CloudFront distribution for {hosting['domain']} serves the "
                f"private bucket {hosting['bucket']} (docs/issuer.md): the function writes this "
                f"cluster's documents under {hosting['path']}/ there, and nothing else."
            )
            return [shared]
        slow = (
            "CloudFront takes about 15 minutes to deploy the distribution; the IAM OIDC provider "
            "and the add-ons' roles follow it."
        )
        notes = [slow]
        if not hosting.get("hostedZoneId"):
            notes.append(
                f"No hostedZoneId: point {hosting['domain']} at the distribution yourself (a "
                "Route 53 alias, or a CNAME); the ClusterPlugin's status.plugins says its name."
            )
        return notes

    def as_dict(self) -> dict[str, Any]:
        """The machine-readable form (``-o yaml|json``)."""
        d: dict[str, Any] = {
            "mode": self.mode.value,
            "issuerURL": self.url,
            "namespace": self.namespace,
            "clusterName": self.cluster,
        }
        if self.mode is IRSAMode.EXTERNAL:
            d["oidcProviderARN"] = self.oidc_provider_arn
            return d
        d["region"] = self.region
        d["regionFrom"] = self.region_source
        d["bucket"] = self.bucket
        if self.hosting is not None:
            d["hosting"] = self.hosting
        d["kubeadmControlPlane"] = {
            "v1beta2": self.patch("v1beta2"),
            "v1beta1": self.patch("v1beta1"),
        }
        d["notes"] = self.notes()
        if self.warnings:
            d["warnings"] = self.warnings
        return d


# The modes without an issuer to print, and why.
_NO_ISSUER = {
    IRSAMode.DISABLED: (
        "spec.irsa.mode is Disabled: the function sets up no IRSA issuer, so there is nothing "
        "to put in the KubeadmControlPlane"
    ),
    IRSAMode.POD_IDENTITY: (
        "spec.irsa.mode is PodIdentity: EKS Pod Identity uses no OIDC issuer (EKS hands out "
        "the add-ons' credentials through the eks-pod-identity-agent), so there is no issuer "
        "URL and nothing to change in the control plane"
    ),
}


def compute(
    xr: Mapping[str, Any],
    *,
    step_input: Mapping[str, Any] | None = None,
    required: Iterable[Mapping[str, Any]] = (),
    region: str | None = None,
) -> Issuer:
    """The issuer of ``xr`` (IssuerError when there is none to print).

    The XR, its input and the cluster's objects are judged and read as the function
    does (``accept``, ``resolve``): what it would refuse, this refuses with the same words.
    """
    try:
        accepted, facts = resolve.accept_with_objects(xr, step_input, required)
    except InvalidInputError as err:
        raise IssuerError(str(err)) from None
    spec, namespace = accepted.spec, accepted.namespace
    mode = spec.irsa.mode
    if mode in _NO_ISSUER:
        raise IssuerError(_NO_ISSUER[mode])
    if mode is IRSAMode.EXTERNAL:
        found = external_issuer(spec, facts)
        if found is None:
            msg = (
                "spec.irsa.mode is External without issuerURL and oidcProviderARN: they are "
                "read from the AWSManagedControlPlane's status.oidcProvider.arn, which is not "
                "known yet (pass the AWSManagedControlPlane with --required once CAPA wrote it)"
            )
            raise IssuerError(msg)
        return Issuer(
            mode, found[0], namespace, spec.cluster_name, oidc_provider_arn=found[1]
        )
    names = accepted.names
    try:
        chosen, source = accept.region(accepted, facts, region)
    except accept.RegionError as err:
        # A CloudFront issuer does not depend on the region.
        if names.cloudfront is None:
            raise IssuerError(str(err)) from None
        chosen, source = "", "nowhere: the issuer behind CloudFront does not depend on it"
    if chosen and names.cloudfront is not None:
        refused = accept.cloudfront_region_problem(accepted, chosen)
        if refused:
            raise IssuerError(": ".join(refused))
    issuer = Issuer(
        mode,
        issuer_url(spec, accepted.names, chosen),
        namespace,
        spec.cluster_name,
        chosen or None,
        source,
        names.issuer_bucket,
        hosting=_hosting(accepted),
    )
    if not accepted.wants_irsa:
        issuer.warnings.append(
            f"no add-on in the spec uses IRSA ({registry.role_fields()}), "
            "so the function creates no bucket or OIDC provider yet; this is the issuer it "
            "will use once one is added"
        )
    return issuer


def _hosting(accepted: accept.Accepted) -> dict[str, str] | None:
    names, cloud_front = accepted.names, accepted.spec.irsa.cloud_front
    if names.cloudfront is None or cloud_front is None:
        return None
    out = {
        "type": "CloudFront",
        "distribution": cloud_front.distribution.value,
        "domain": cloud_front.domain,
        "path": names.issuer_path,
        "bucket": names.issuer_bucket,
    }
    if cloud_front.hosted_zone_id:
        out["hostedZoneId"] = cloud_front.hosted_zone_id
    return out


def text(issuer: Issuer) -> str:
    """The human-readable report."""
    import yaml  # noqa: PLC0415

    def block(obj: Any) -> str:
        dumped = yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, width=1 << 30)
        return "\n".join("    " + line for line in dumped.splitlines())

    who = f"{issuer.namespace}/{issuer.cluster}"
    if issuer.mode is IRSAMode.EXTERNAL:
        return (
            f"IRSA issuer (External) of {who}:\n\n    {issuer.url}\n\n"
            f"OIDC provider: {issuer.oidc_provider_arn}\n"
            "The cluster's own issuer is used (EKS or another existing one): "
            "there is nothing to change in the "
            "control plane.\n"
        )
    hosting = issuer.hosting
    where = f", region {issuer.region} (from {issuer.region_source})" if issuer.region else ""
    how = "SelfHosted"
    if hosting is not None:
        how += f", behind the {hosting['distribution']} CloudFront distribution"
    lines = [
        f"IRSA issuer ({how}) of {who}{where}:",
        "",
        f"    {issuer.url}",
        "",
        "Put it in the cluster template's KubeadmControlPlane BEFORE creating the cluster:",
        "the API server signs service-account tokens with this issuer from its first boot.",
        "",
        "KubeadmControlPlane v1beta2 (extraArgs is a list of name/value):",
        "",
        block({"spec": issuer.patch("v1beta2")["spec"]}),
        "",
        "KubeadmControlPlane v1beta1 (extraArgs is a map):",
        "",
        block({"spec": issuer.patch("v1beta1")["spec"]}),
        "",
        "Notes:",
    ]
    lines += [f"- {n}" for n in issuer.notes()]
    lines += [f"warning: {w}" for w in issuer.warnings]
    return "\n".join(lines) + "\n"
