"""EKS Pod Identity (``spec.irsa.mode: PodIdentity``): the eks-pod-identity-agent.

Wanted when the mode is PodIdentity and an add-on needs an IAM role. EKS injects a pod's
credentials when the pod is created, and the agent on its node hands them out: every
add-on with a role starts after the agent (``agent_ready``) and after its own
association (``iam``), or it would run without credentials until restarted.

The agent is either a Helm Release of the eks-pod-identity-agent chart
(``charts.podIdentityAgent``: upstream publishes it in no Helm repository, so it is a
mirror of the user's), or, when the AWSManagedControlPlane lists the EKS add-on
``eks-pod-identity-agent`` in ``spec.addons``, CAPA's, waited for until CAPA reports it
ACTIVE. Never an EKS ``Addon`` managed resource: CAPA deletes every managed add-on its
``spec.addons`` does not list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from google.protobuf import struct_pb2

from function import structs
from function.addons.kit.helm import release
from function.cluster import ClusterFacts
from function.context import CallContext
from function.graph import (
    ASSOCIATION_SUFFIX,
    Addon,
    MissingFactError,
    Plugin,
    Release,
    Wait,
    after,
    control_plane_initialized,
)
from function.names import partition_of
from function.spec_base import IRSAMode
from function.step_input import Charts, ChartSource, StepInput

EKS_ADDON = "eks-pod-identity-agent"
# Pod Identity is not offered in the China regions (EKS user guide, docs.amazonaws.cn:
# "Pod Identity is not available in China Regions. Use IAM roles for service accounts").
NO_POD_IDENTITY = {"aws-cn": "EKS Pod Identity is not available in the China regions"}
# The registry of the EKS add-ons' images per region: the nodes pull the agent's image from
# their own region's (opt-in regions have accounts of their own, GovCloud too). From the EKS
# user guide, "View Amazon container image registries for Amazon EKS add-ons"
# (https://docs.aws.amazon.com/eks/latest/userguide/add-ons-images.html, read 2026-11-28; its
# source awsdocs/amazon-eks-user-guide latest/ug/workloads/add-ons-images.adoc at 4d52b4d,
# 2024-12-18, has every row but ap-east-2, ap-southeast-5/6/7 and mx-central-1, which the
# published page lists, as does awslabs/amazon-eks-ami's get-ecr-uri.sh). The page prints
# ap-east-2's host as ap-east-1: a slip, a registry is in its own region. The China regions
# are left out: Pod Identity is not offered there. A region not listed: the step input's
# podIdentityAgentRegistry.
_ADDON_REGISTRY_ACCOUNTS = {
    "af-south-1": "877085696533",
    "ap-east-1": "800184023465",
    "ap-east-2": "533267051163",
    "ap-northeast-1": "602401143452",
    "ap-northeast-2": "602401143452",
    "ap-northeast-3": "602401143452",
    "ap-south-1": "602401143452",
    "ap-south-2": "900889452093",
    "ap-southeast-1": "602401143452",
    "ap-southeast-2": "602401143452",
    "ap-southeast-3": "296578399912",
    "ap-southeast-4": "491585149902",
    "ap-southeast-5": "151610086707",
    "ap-southeast-6": "333609536671",
    "ap-southeast-7": "121268973566",
    "ca-central-1": "602401143452",
    "ca-west-1": "761377655185",
    "eu-central-1": "602401143452",
    "eu-central-2": "900612956339",
    "eu-north-1": "602401143452",
    "eu-south-1": "590381155156",
    "eu-south-2": "455263428931",
    "eu-west-1": "602401143452",
    "eu-west-2": "602401143452",
    "eu-west-3": "602401143452",
    "il-central-1": "066635153087",
    "me-central-1": "759879836304",
    "me-south-1": "558608220178",
    "mx-central-1": "730335286997",
    "sa-east-1": "602401143452",
    "us-east-1": "602401143452",
    "us-east-2": "602401143452",
    "us-gov-east-1": "151742754352",
    "us-gov-west-1": "013241004608",
    "us-west-1": "602401143452",
    "us-west-2": "602401143452",
}
REGISTRY_FIELD = "input.podIdentityAgentRegistry"


def addon_registry(region: str) -> str | None:
    """The EKS add-on image registry of ``region`` (the EKS user guide's), or None."""
    account = _ADDON_REGISTRY_ACCOUNTS.get(region)
    if account is None:
        return None
    return f"{account}.dkr.ecr.{region}.{partition_of(region).dns_suffix}"


def image_registry(step: StepInput, region: str) -> str | None:
    """Where the agent chart's image comes from: the step input's mirror, else the region's."""
    return step.pod_identity_agent_registry or addon_registry(region)


# EKS's status of a managed add-on that runs.
ACTIVE = "ACTIVE"
ASSOCIATION_KIND = "PodIdentityAssociation"


def _chart(charts: Charts) -> ChartSource:
    if charts.pod_identity_agent is None:
        # accept.refuse has refused this XR already: never reached.
        raise MissingFactError(
            Wait("input.charts.podIdentityAgent", "no chart source for the agent", blocked=True)
        )
    return charts.pod_identity_agent


AGENT = Release(
    "pod-identity-agent-release",
    _chart,
    namespace="kube-system",
    name=EKS_ADDON,
    wait=True,
)


# provider-upjet-aws#2199: an association whose create the provider lost (restarted while it
# waited for it) is never adopted; each create then fails with EKS's 409.
_ALREADY_EXISTS = re.compile(r"ResourceInUseException: Association already exists: (a-[0-9a-z]+)")


def stuck_association(observed: struct_pb2.Struct) -> str:
    """What to do about an association the provider keeps creating, or "" (Node.diagnose)."""
    found = _ALREADY_EXISTS.search(structs.failing_message(observed))
    if found is None:
        return ""
    return (
        f"EKS already has this association ({found.group(1)}) but the provider lost its id and "
        "retries the create forever (Synced=False: 409 Association already exists; "
        "crossplane-contrib/provider-upjet-aws#2199): adopt it with kubectl annotate "
        f"{structs.kubectl_ref(observed, ASSOCIATION_KIND)} "
        f"crossplane.io/external-name={found.group(1)}"
    )


def eks_cluster_name(ctx: CallContext) -> str:
    """The name EKS knows the cluster by (AWSManagedControlPlane spec.eksClusterName)."""
    name = ctx.facts.eks_cluster_name
    if not name:
        raise MissingFactError(
            Wait(
                "AWSManagedControlPlane spec.eksClusterName",
                "the EKS cluster's name is not known yet (CAPA's webhook defaults it)",
            )
        )
    return name


def agent(ctx: CallContext) -> dict[str, Any]:
    """The eks-pod-identity-agent DaemonSet (host network, every Linux node)."""
    registry = image_registry(ctx.step, ctx.region)
    if registry is None:
        # accept.refuse_for_cluster has refused this XR already: never reached.
        raise MissingFactError(Wait(REGISTRY_FIELD, "no registry for the agent", blocked=True))
    return release(
        ctx,
        AGENT,
        values={
            "clusterName": eks_cluster_name(ctx),
            "env": {"AWS_REGION": ctx.region},
            "image": {"containerRegistry": registry},
        },
    )


def by_capa(facts: ClusterFacts) -> bool:
    """Whether CAPA installs the agent (the AWSManagedControlPlane's spec.addons lists it)."""
    return EKS_ADDON in facts.eks_addons


def wanted(ctx: CallContext) -> bool:
    """Whether this XR uses Pod Identity for at least one add-on role."""
    return ctx.irsa is IRSAMode.POD_IDENTITY and ctx.wants_irsa


# The agent runs on the host network: it waits for neither the CNI nor the CCM.
_AGENT = AGENT.as_node(agent, (control_plane_initialized,))
_AGENT_READY = after(AGENT.node)


def plugin(ctx: CallContext) -> Plugin | None:
    """The agent plugin: its Release, or nothing of its own when CAPA installs it."""
    if not wanted(ctx):
        return None
    if by_capa(ctx.facts):
        note = f"the {EKS_ADDON} is the EKS add-on CAPA installs (AWSManagedControlPlane)"
        # A Release of the agent from before CAPA's add-on is orphaned, never uninstalled: both
        # name the DaemonSet eks-pod-identity-agent, and an uninstall would delete it under
        # CAPA's add-on, leaving every pod without credentials until EKS puts it back.
        return Plugin(
            ADDON.name, (), note=note, waits_for=agent_ready, handed_over=(AGENT.node,)
        )
    return Plugin(ADDON.name, (_AGENT,))


def status(ctx: CallContext) -> Mapping[str, Any]:
    """status.podIdentityCluster while an association exists (read by the rule on mode changes)."""
    resources = ctx.observed.resources
    for name in resources:  # the map's own iteration, in C (values() is Python's)
        # Every association is a role's, named after it: the others' bodies are not read.
        if not name.endswith(ASSOCIATION_SUFFIX):
            continue
        obj = resources[name].resource
        fields = obj.fields  # every observed resource, every call: read directly
        if "kind" in fields and fields["kind"].string_value == ASSOCIATION_KIND:
            cluster = structs.str_at(obj, "spec", "forProvider", "clusterName")
            if cluster:
                return {"podIdentityCluster": cluster}
    return {}


def agent_ready(ctx: CallContext) -> Wait | None:
    """Gate: the agent runs (Pod Identity only): its Release is ready, or CAPA's add-on ACTIVE."""
    if ctx.irsa is not IRSAMode.POD_IDENTITY:
        return None
    if not by_capa(ctx.facts):
        return _AGENT_READY(ctx)
    status = ctx.facts.eks_addons.get(EKS_ADDON, "")
    if status == ACTIVE:
        return None
    said = f"reports it {status}" if status else "has not reported it yet"
    return Wait(
        f"EKS add-on {EKS_ADDON} ACTIVE",
        f"the EKS add-on {EKS_ADDON} runs the agent: CAPA {said} (AWSManagedControlPlane "
        "status.addons)",
        reason="EKS add-on",
    )


def registry_problem(step: StepInput, facts: ClusterFacts, region: str) -> str | None:
    """Why the agent's chart has no image registry here (a FATAL on REGISTRY_FIELD), or None."""
    if step.charts.pod_identity_agent is None or by_capa(facts) or not region:
        return None
    if image_registry(step, region) is not None:
        return None
    return (
        f"the eks-pod-identity-agent chart needs the registry its image is pulled from, and "
        f"the EKS user guide's table of add-on registries (function/addons/pod_identity.py) "
        f"names none for {region}: give your mirror as {REGISTRY_FIELD} (host[:port][/path])"
    )


def cluster_problem(mode: IRSAMode, facts: ClusterFacts, region: str, charts: Charts) -> str | None:
    """Why this cluster cannot have Pod Identity (a FATAL on spec.irsa.mode), or None."""
    if mode is not IRSAMode.POD_IDENTITY:
        return None
    if facts.control_plane_kind and not facts.eks:
        return (
            f"PodIdentity needs an EKS control plane (AWSManagedControlPlane); this cluster's is "
            f"a {facts.control_plane_kind}, where EKS Pod Identity does not exist: use IRSA "
            "(mode SelfHosted)"
        )
    partition = partition_of(region).name if region else ""
    if partition in NO_POD_IDENTITY:
        return (
            f"{NO_POD_IDENTITY[partition]} ({region} is in {partition}): use IRSA (mode "
            "External with the EKS cluster's issuer)"
        )
    if facts.control_plane_found and charts.pod_identity_agent is None and not by_capa(facts):
        return (
            f"PodIdentity needs the {EKS_ADDON} on the nodes: list the EKS add-on "
            f"{EKS_ADDON} in the AWSManagedControlPlane's spec.addons, or give the step "
            "input's charts.podIdentityAgent (the chart has no public Helm repository: mirror "
            "it into one of your own)"
        )
    return None


ADDON = Addon(
    "pod-identity-agent",
    plugin,
    title="the EKS Pod Identity agent",
    extra_releases=(AGENT,),
    status=status,
)
