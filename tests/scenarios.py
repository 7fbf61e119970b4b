"""Scenarios shared by the tests: the bundled examples and variants of them."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from function.plan import USAGE_ENDS
from function_tools import input_files
from function_tools.in_memory_crossplane import InMemoryCrossplane

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def load_yaml(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def example(name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(XR, required objects) of an example."""
    xr = load_yaml(EXAMPLES / name / "xr.yaml")
    required = [load_yaml(p) for p in sorted((EXAMPLES / name / "required").glob("*.yaml"))]
    return xr, required


def own_input(name: str) -> dict[str, Any]:
    """The step input of the example's own Composition (examples/<name>/composition.yaml), if any.

    examples/calico-legacy-claim has one: its CAPI objects are in the v1beta1 contract,
    which the shipped Composition does not ask for.
    """
    path = EXAMPLES / name / "composition.yaml"
    if not path.is_file():
        return {}
    return input_files.step_from_composition(input_files.load_documents([path]))[1]


def find(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == kind)


@dataclass
class Scenario:
    """An example, possibly changed, and how to play it."""

    name: str
    example: str
    mutate_xr: Callable[[dict[str, Any]], None] | None = None
    mutate_required: Callable[[list[dict[str, Any]]], None] | None = None
    step_input: dict[str, Any] = field(default_factory=dict)
    crossplane_v1: bool = False
    # Kinds slower to turn Ready in the InMemoryCrossplane (kind -> reconciles after creation).
    slow: dict[str, int] = field(default_factory=dict)

    def world(self, *, staged: bool = True, **kw: Any) -> InMemoryCrossplane:
        xr, required = example(self.example)
        xr, required = copy.deepcopy(xr), copy.deepcopy(required)
        if self.mutate_xr:
            self.mutate_xr(xr)
        if self.mutate_required:
            self.mutate_required(required)
        kw.setdefault("slow", self.slow)
        step_input = {**own_input(self.example), **self.step_input}
        w = InMemoryCrossplane(xr, required, step_input=step_input, crossplane_v1=self.crossplane_v1, **kw)
        if staged:
            w.set_control_plane(initialized=False, available=False)
        return w


def usage_order_problems(world: InMemoryCrossplane) -> list[str]:
    """For each Usage the world withdrew together with both its ends (the last time each): the
    Usage deleted only once its user was gone from the API server, and what it used only once
    the Usage was gone too. (A Usage withdrawn while what it used stays holds nothing back.)"""
    deleted_at = {n: s for s, n in world.deletions}
    gone_at = {n: s for s, n in world.gone}
    out = []
    for usage, (by, of) in USAGE_ENDS.items():
        if not {usage, by, of} <= deleted_at.keys():
            continue
        if not gone_at.get(by, deleted_at[usage] + 1) <= deleted_at[usage]:
            out.append(f"{usage} deleted at {deleted_at[usage]}, {by} gone at {gone_at.get(by)}")
        if not gone_at.get(usage, deleted_at[of] + 1) <= deleted_at[of]:
            out.append(f"{of} deleted at {deleted_at[of]}, {usage} gone at {gone_at.get(usage)}")
    return out


def staged_control_plane(initialized_at: int = 3, available_at: int = 8) -> Callable[[InMemoryCrossplane], None]:
    """A ``before`` hook bringing the control plane up at the given reconciles."""

    def before(w: InMemoryCrossplane) -> None:
        if w.step + 1 == initialized_at:
            w.set_control_plane(initialized=True, available=False)
        if w.step + 1 == available_at:
            w.set_control_plane(initialized=True, available=True)

    return before


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(xr: dict[str, Any]) -> None:
        node = xr["spec"]
        *parents, last = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value

    return mutate


def _all(*fns: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def mutate(xr: dict[str, Any]) -> None:
        for f in fns:
            f(xr)

    return mutate


def _legacy(xr: dict[str, Any]) -> None:
    # The full example as a legacy cluster-scoped XClusterPlugin without a claim.
    xr["kind"] = "XClusterPlugin"
    ns = xr["metadata"].pop("namespace")
    xr["spec"]["clusterNamespace"] = ns


def _overrides(required: list[dict[str, Any]]) -> None:
    # The user brings their own node and control-plane groups: CAPA leaves them alone.
    aws = find(required, "AWSCluster")
    aws["spec"]["network"]["securityGroupOverrides"] = {
        "controlplane": "sg-0ccccccccccccccc1",
        "node": "sg-0ddddddddddddddd1",
    }


def _region(region: str) -> Callable[[list[dict[str, Any]]], None]:
    def mutate(required: list[dict[str, Any]]) -> None:
        find(required, "AWSCluster")["spec"]["region"] = region

    return mutate


SCENARIOS = [
    Scenario("selfhosted-full", "selfhosted-full"),
    Scenario("calico-legacy-claim", "calico-legacy-claim"),
    Scenario("calico-legacy-claim-v1", "calico-legacy-claim", crossplane_v1=True),
    Scenario("external-eks", "external-eks"),
    Scenario("selfhosted-legacy-xr", "selfhosted-full", mutate_xr=_legacy),
    Scenario("selfhosted-legacy-xr-v1", "selfhosted-full", mutate_xr=_legacy, crossplane_v1=True),
    Scenario(
        "irsa-disabled",
        "selfhosted-full",
        mutate_xr=_set("irsa", {"mode": "Disabled"}),
    ),
    Scenario(
        "sg-overrides-auto",
        "calico-legacy-claim",
        mutate_required=_overrides,
        mutate_xr=_set("networking.calico.encapsulation", "IPIP"),
    ),
    Scenario(
        "sg-always-vpc-cni",
        "selfhosted-full",
        mutate_xr=_set("securityGroups", {"manage": "Always"}),
    ),
    Scenario(
        "cert-manager-existing",
        "selfhosted-full",
        mutate_xr=_set("irsa.podIdentityWebhook", {"install": True, "certManager": "Existing"}),
    ),
    Scenario(
        "no-webhook-no-cni",
        "selfhosted-full",
        mutate_xr=_all(
            _set("irsa.podIdentityWebhook", {"install": False}),
            lambda xr: xr["spec"].pop("networking"),
        ),
    ),
    # spec.region wins over the AWSCluster's, so both are set; a third case leaves
    # spec.region out so the AWSCluster's region is the one used.
    Scenario(
        "china-region",
        "selfhosted-full",
        mutate_xr=_set("region", "cn-north-1"),
        mutate_required=_region("cn-north-1"),
    ),
    Scenario(
        "govcloud-region",
        "selfhosted-full",
        mutate_xr=_set("region", "us-gov-west-1"),
        mutate_required=_region("us-gov-west-1"),
    ),
    Scenario(
        "region-from-awscluster",
        "calico-legacy-claim",
        mutate_xr=lambda xr: xr["spec"].pop("region", None),
        mutate_required=_region("eu-central-1"),
    ),
    Scenario(
        "prefixed-and-versions",
        "selfhosted-full",
        step_input={
            "namePrefix": "acme-",
            "ttl": {"waiting": "15s", "ready": "30m"},
            "charts": {
                "ebs": {
                    "repository": "oci://registry.example.com/charts",
                    "name": "aws-ebs-csi-driver",
                    "version": "2.63.0",
                    "pullSecretRef": {"name": "registry", "namespace": "crossplane-system"},
                }
            },
        },
        mutate_xr=_all(
            _set(
                "storage.ebs.values",
                {"controller": {"replicaCount": 3}, "node": {"tolerateAllTaints": True}},
            ),
            _set("networking.amazonVPC.version", "1.21.1"),
        ),
    ),
]

# external-dns (examples/external-dns): both flavours, both non-aws partitions, EKS (External
# IRSA) and without IRSA, so every guard over SCENARIOS covers it.
_DNS = {"externalDNS": {"hostedZoneIDs": ["Z0123456789ABC"], "domainFilters": ["example.com"]}}
SCENARIOS += [
    Scenario("external-dns", "external-dns"),
    Scenario("external-dns-legacy-xr", "external-dns", mutate_xr=_legacy),
    Scenario("external-dns-legacy-xr-v1", "external-dns", mutate_xr=_legacy, crossplane_v1=True),
    Scenario(
        "external-dns-china",
        "external-dns",
        mutate_xr=_set("region", "cn-northwest-1"),
        mutate_required=_region("cn-northwest-1"),
    ),
    Scenario(
        "external-dns-govcloud",
        "external-dns",
        mutate_xr=_set("region", "us-gov-east-1"),
        mutate_required=_region("us-gov-east-1"),
    ),
    Scenario("external-dns-irsa-disabled", "external-dns", mutate_xr=_set("irsa", {"mode": "Disabled"})),
    Scenario("external-eks-dns", "external-eks", mutate_xr=_set("dns", _DNS)),
]

# EKS (examples/external-eks): the External issuer given in the XR, agreeing with the one the
# AWSManagedControlPlane reports (the example leaves it out and reads it from there).
EKS_ISSUER = "https://oidc.eks.us-west-2.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE"
EKS_PROVIDER = f"arn:aws:iam::111122223333:oidc-provider/{EKS_ISSUER.removeprefix('https://')}"
# EKS Pod Identity: examples/eks-pod-identity (a namespaced XR, the agent as CAPA's EKS add-on), as
# it is and with the agent as a Helm Release of a mirrored chart when the AWSManagedControlPlane does
# not list it; examples/eks-pod-identity-legacy (a legacy XR, the agent's chart in its own
# Composition), also under Crossplane 1.x.
AGENT_CHART = {
    "podIdentityAgent": {
        "repository": "oci://registry.example.com/charts",
        "name": "eks-pod-identity-agent",
        "version": "1.2.0",
    }
}

AGENT_MIRROR = "registry.example.com:5000/eks-mirror"


def _agent_by_helm(required: list[dict[str, Any]]) -> None:
    cp = find(required, "AWSManagedControlPlane")
    cp["spec"].pop("addons")
    cp["status"].pop("addons")


SCENARIOS += [
    Scenario("eks-pod-identity", "eks-pod-identity"),
    Scenario(
        "eks-pod-identity-agent-release",
        "eks-pod-identity",
        mutate_required=_agent_by_helm,
        step_input={"charts": AGENT_CHART},
    ),
    # The agent's image from the step input's mirror; in GovCloud, from the region's registry.
    Scenario(
        "eks-pod-identity-agent-mirror",
        "eks-pod-identity",
        mutate_required=_agent_by_helm,
        step_input={"charts": AGENT_CHART, "podIdentityAgentRegistry": AGENT_MIRROR},
    ),
    Scenario(
        "eks-pod-identity-agent-govcloud",
        "eks-pod-identity",
        mutate_xr=_set("region", "us-gov-west-1"),
        mutate_required=_agent_by_helm,
        step_input={"charts": AGENT_CHART},
    ),
    Scenario("eks-pod-identity-legacy", "eks-pod-identity-legacy"),
    Scenario("eks-pod-identity-legacy-v1", "eks-pod-identity-legacy", crossplane_v1=True),
    Scenario(
        "external-eks-given",
        "external-eks",
        mutate_xr=_set(
            "irsa", {"mode": "External", "issuerURL": EKS_ISSUER, "oidcProviderARN": EKS_PROVIDER}
        ),
    ),
]

# The issuer behind CloudFront (examples/cloudfront-shared, a namespaced XR; examples/
# cloudfront-managed, a legacy XR): both flavours of each, Crossplane 1.x, with and without the
# Route 53 record, a path and a price class, a Shared bucket in another region. The distribution
# is slower to turn Ready than the rest, as CloudFront's is (about 15 minutes).
SLOW_DISTRIBUTION = {"Distribution": 4}


def _namespaced(xr: dict[str, Any]) -> None:
    # The legacy example as a namespaced ClusterPlugin of Crossplane v2.
    xr["kind"] = "ClusterPlugin"
    spec = xr["spec"]
    xr["metadata"]["namespace"] = spec.pop("clusterNamespace")
    spec["crossplane"] = {"compositionRef": {"name": "clusterplugins.clusterplugin.dev"}}
    spec.pop("compositionRef")


_CLOUDFRONT = "irsa.hosting.cloudFront"
SCENARIOS += [
    Scenario("cloudfront-shared", "cloudfront-shared"),
    Scenario("cloudfront-shared-legacy-xr", "cloudfront-shared", mutate_xr=_legacy),
    Scenario(
        "cloudfront-shared-legacy-xr-v1", "cloudfront-shared", mutate_xr=_legacy, crossplane_v1=True
    ),
    Scenario(
        "cloudfront-shared-bucket-elsewhere",
        "cloudfront-shared",
        mutate_xr=_all(
            _set(f"{_CLOUDFRONT}.bucketRegion", "eu-central-1"),
            _set(f"{_CLOUDFRONT}.pathPrefix", "team-c/api"),
        ),
    ),
    Scenario("cloudfront-managed", "cloudfront-managed", slow=SLOW_DISTRIBUTION),
    Scenario(
        "cloudfront-managed-v1", "cloudfront-managed", crossplane_v1=True, slow=SLOW_DISTRIBUTION
    ),
    Scenario(
        "cloudfront-managed-namespaced",
        "cloudfront-managed",
        mutate_xr=_namespaced,
        slow=SLOW_DISTRIBUTION,
    ),
    Scenario(
        "cloudfront-managed-no-record",
        "cloudfront-managed",
        mutate_xr=_all(
            _namespaced,
            lambda xr: xr["spec"]["irsa"]["hosting"]["cloudFront"].pop("hostedZoneId"),
            _set(f"{_CLOUDFRONT}.pathPrefix", "issuers/auth"),
            _set(f"{_CLOUDFRONT}.priceClass", "PriceClass_All"),
        ),
        step_input={"namePrefix": "acme-"},
        slow=SLOW_DISTRIBUTION,
    ),
]

SCENARIO_IDS = [s.name for s in SCENARIOS]


def by_name(name: str) -> Scenario:
    return next(s for s in SCENARIOS if s.name == name)
