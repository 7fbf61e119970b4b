"""``issuer``: the SelfHosted IRSA issuer URL, and the KubeadmControlPlane change it needs.

The kube-apiserver signs service-account tokens with ``--service-account-issuer``
from its first boot, so the URL must be in the cluster template before the
cluster is created. It is a pure function of the XR (and the step input's
``namePrefix``): ``Names(prefix, namespace, clusterName, irsa.bucketName)
.issuer_url(region)``, the same computation the function uses for
``status.issuerURL``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from crossplane.function import resource

from function import fn
from function.names import Names
from function.spec import REGION, InvalidInputError, IRSAMode, parse_input, parse_spec

STS_AUDIENCE = "sts.amazonaws.com"
KUBEADM_DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"
KCP_GROUP = "controlplane.cluster.x-k8s.io"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"


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
        return [keep, migrate, audiences, keys]

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
        d["kubeadmControlPlane"] = {
            "v1beta2": self.patch("v1beta2"),
            "v1beta1": self.patch("v1beta1"),
        }
        d["notes"] = self.notes()
        if self.warnings:
            d["warnings"] = self.warnings
        return d


def _aws_cluster_region(
    required: Iterable[dict[str, Any]], namespace: str, cluster: str
) -> str | None:
    """spec.region of the cluster's AWSCluster among ``required``."""
    objs = [o for o in required if isinstance(o, dict)]
    infra_name = None
    for o in objs:
        meta = o.get("metadata") or {}
        if (
            o.get("kind") == "Cluster"
            and meta.get("name") == cluster
            and meta.get("namespace", namespace) == namespace
        ):
            infra_name = ((o.get("spec") or {}).get("infrastructureRef") or {}).get("name")
    candidates = []
    for o in objs:
        meta = o.get("metadata") or {}
        if o.get("kind") != "AWSCluster" or meta.get("namespace", namespace) != namespace:
            continue
        rank = (
            0
            if infra_name and meta.get("name") == infra_name
            else 1
            if (meta.get("labels") or {}).get(CLUSTER_NAME_LABEL) == cluster
            else 2
            if meta.get("name") == cluster
            else None
        )
        region = (o.get("spec") or {}).get("region")
        if rank is not None and region:
            candidates.append((rank, str(region)))
    return min(candidates)[1] if candidates else None


def _region(spec_region: str | None, flag: str | None, found: str | None) -> tuple[str, str]:
    if flag and not REGION.match(flag):
        msg = (
            f"--region {flag!r} is not an AWS region such as us-east-1, cn-north-1 or us-gov-west-1"
        )
        raise IssuerError(msg)
    if spec_region:
        if flag and flag != spec_region:
            msg = (
                f"--region {flag} disagrees with spec.region {spec_region}, which the function uses"
            )
            raise IssuerError(msg)
        return spec_region, "spec.region"
    if found:
        if flag and flag != found:
            msg = (
                f"--region {flag} disagrees with the AWSCluster's spec.region {found}, "
                "which the function uses"
            )
            raise IssuerError(msg)
        return found, "AWSCluster spec.region"
    if flag:
        return flag, "--region"
    msg = (
        "the region is unknown: set spec.region, pass --region, "
        "or pass the AWSCluster with --required"
    )
    raise IssuerError(msg)


def compute(
    xr: dict[str, Any],
    *,
    step_input: dict[str, Any] | None = None,
    required: Iterable[dict[str, Any]] = (),
    region: str | None = None,
) -> Issuer:
    """The issuer of ``xr`` (IssuerError when there is none to print)."""
    try:
        spec = parse_spec(xr.get("spec") or {})
        step = parse_input(step_input)
        # The same namespace rules as the function: metadata.namespace, the claim's
        # namespace label, or spec.clusterNamespace.
        namespace, _ = fn.cluster_namespace(resource.dict_to_struct(xr), spec)
    except InvalidInputError as err:
        raise IssuerError(f"{err.field}: {err.message}") from None
    mode = spec.irsa.mode
    if mode is IRSAMode.DISABLED:
        msg = (
            "spec.irsa.mode is Disabled: the function sets up no IRSA issuer, "
            "so there is nothing to put in "
            "the KubeadmControlPlane"
        )
        raise IssuerError(msg)
    if mode is IRSAMode.EXTERNAL:
        return Issuer(
            mode,
            spec.irsa.issuer_url.rstrip("/"),
            namespace,
            spec.cluster_name,
            oidc_provider_arn=spec.irsa.oidc_provider_arn,
        )
    found = _aws_cluster_region(required, namespace, spec.cluster_name)
    chosen, source = _region(spec.region, region, found)
    names = Names(step.name_prefix, namespace, spec.cluster_name, spec.irsa.bucket_name)
    issuer = Issuer(
        mode, names.issuer_url(chosen), namespace, spec.cluster_name, chosen, source, names.bucket
    )
    if not spec.wants_aws:
        issuer.warnings.append(
            "no add-on in the spec uses IRSA (amazonVPC, ebs, efs, awsLoadBalancerController), "
            "so the function creates no bucket or OIDC provider yet; this is the issuer it "
            "will use once one is added"
        )
    return issuer


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
    lines = [
        f"IRSA issuer (SelfHosted) of {who}, region {issuer.region} (from {issuer.region_source}):",
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
