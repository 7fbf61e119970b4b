"""The AWS cloud controller manager (docs/architecture.md, "The cloud controller manager").

A Release, no IAM role.

Since Kubernetes 1.27 there is no in-tree AWS cloud provider. A kubelet started
with ``cloud-provider: external`` (CAPA's default template) keeps the
``node.cloudprovider.kubernetes.io/uninitialized`` taint until a CCM runs, so
nothing but host-network DaemonSets schedules before it: it is emitted as soon as
the control plane is initialized, and every other workload release waits for it.

No IRSA on purpose: the CCM has to run before the pod identity webhook can (the
webhook needs initialized nodes), so it uses the control-plane instance profile,
whose CAPA default policy carries the cloud-provider permissions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from function.addons.kit.helm import chart_version, release
from function.cluster import EKS_CONTROL_PLANE, ClusterFacts, minor_of
from function.context import CallContext
from function.graph import (
    Addon,
    ConditionOut,
    MissingFactError,
    Plugin,
    Release,
    Wait,
    after,
    control_plane_initialized,
    eks_or_unread,
)
from function.spec_base import AddonSpec

if TYPE_CHECKING:  # the frame imports the add-ons' models: a type here, no import
    from function.spec import ClusterPluginSpec

# --- its place in the ClusterPlugin spec (function/spec.py frames it) ----------------


class AWSCloudProviderSpec(AddonSpec):
    """The AWS cloud-controller-manager (kubernetes/cloud-provider-aws chart). No IAM role."""

RELEASE = Release(
    "ccm-release",
    lambda charts: charts.cloud_controller_manager,
    namespace="kube-system",
    name="aws-cloud-controller-manager",
    wait=True,
)
# image.tag is not owned: a user pins it in values (say, for a minor newer than
# the table below), and the function then stops moving it.
OWNED = (("hostNetworking",), ("args",), ("namespace",))

# The newest cloud-provider-aws patch release per Kubernetes minor (its git tags,
# 2026-11). The CCM is released per minor and supports that minor's API server;
# add a row when a minor comes out (a minor not listed uses the chart's default tag).
IMAGE_TAGS: dict[tuple[int, int], str] = {
    (1, 36): "v1.36.1",
    (1, 35): "v1.35.2",
    (1, 34): "v1.34.3",
    (1, 33): "v1.33.4",
    (1, 32): "v1.32.8",
    (1, 31): "v1.31.9",
    (1, 30): "v1.30.10",
    (1, 29): "v1.29.10",
    (1, 28): "v1.28.11",
    (1, 27): "v1.27.10",
}


def image_tag(kubernetes_version: str | None) -> str | None:
    """The CCM image tag for a control plane version, or None outside the table."""
    minor = minor_of(kubernetes_version)
    return IMAGE_TAGS.get(minor) if minor is not None else None


def _version(ctx: CallContext) -> str | None:
    if not ctx.facts.control_plane_found:
        # Without the control plane the tag is unknown: an observed Release is
        # carried over as it is rather than falling back to the chart's default.
        raise MissingFactError(
            Wait("control plane", "the control plane has not been read yet (its version)")
        )
    return ctx.facts.kubernetes_version


def ccm_release(ctx: CallContext) -> dict[str, Any]:
    """The aws-cloud-controller-manager DaemonSet on the control-plane nodes' host network."""
    spec = ADDON.spec(ctx.spec)
    assert spec is not None  # noqa: S101  # plugin() only adds this node when set
    values: dict[str, Any] = {
        # The chart puts its objects in .Values.namespace, not the release's namespace.
        "namespace": RELEASE.namespace,
        # The chart's default is the pod network, which cannot exist before the CCM
        # has initialized the nodes (the CNI's pods are also held back by the taint).
        "hostNetworking": True,
        "args": [
            "--v=2",
            "--cloud-provider=aws",
            # Tags the load balancers and security groups it creates, so CAPA's
            # external resource garbage collection finds them at deletion.
            f"--cluster-name={ctx.facts.kubernetes_cluster_name or ctx.spec.cluster_name}",
            # The CNI (VPC CNI or Calico) routes pods itself.
            "--configure-cloud-routes=false",
        ],
    }
    tag = image_tag(_version(ctx))
    if tag is not None:
        values["image"] = {"tag": tag}
    return release(ctx, RELEASE, values=values, version=spec.version, user_values=spec.values)


def note(ctx: CallContext) -> str:
    """What the status says when the version table has no tag for the cluster's minor."""
    spec = ADDON.spec(ctx.spec)
    version = ctx.facts.kubernetes_version
    image = spec.values.get("image") if spec is not None else None
    pinned = isinstance(image, dict) and "tag" in image
    if pinned or not ctx.facts.control_plane_found or image_tag(version) is not None:
        return ""
    try:
        chart = chart_version(ctx, RELEASE, spec.version if spec else None)
    except MissingFactError:
        chart = "(its default)"
    low, high = min(IMAGE_TAGS), max(IMAGE_TAGS)
    return (
        f"Kubernetes {version or '(the control plane has no spec.version)'} is outside this "
        f"function's CCM version table ({low[0]}.{low[1]} to {high[0]}.{high[1]}): the image "
        f"tag defaults to chart {RELEASE.name} {chart}'s; pin one in "
        f"{ADDON.values_field}.image.tag"
    )


_NODES = (RELEASE.as_node(ccm_release, (control_plane_initialized,)),)
_RELEASE_READY = after(RELEASE.node)


def plugin(ctx: CallContext) -> Plugin | None:
    """The cloud controller manager, when wanted."""
    if ADDON.spec(ctx.spec) is None:
        return None
    return Plugin(ADDON.name, _NODES, note=note(ctx))


def ready(ctx: CallContext) -> Wait | None:
    """Gate: the cloud controller manager is ready, when this XR installs it.

    Until it runs, nodes keep the uninitialized taint and no ordinary pod schedules.
    """
    if ADDON.spec(ctx.spec) is None:
        return None
    return _RELEASE_READY(ctx)


CONDITION = "CloudProviderReady"


def condition(ctx: CallContext, phases: Mapping[str, str]) -> ConditionOut:
    """Whether the nodes have a cloud controller manager, and who provides it."""
    phase = phases.get(ADDON.name)
    if phase == "Ready":
        return ConditionOut(
            CONDITION, "True", "Installed", f"{RELEASE.name} runs on the control-plane nodes"
        )
    if phase is not None:
        return ConditionOut(
            CONDITION,
            "False",
            "Installing",
            f"{RELEASE.name} is {phase.lower()}; nodes stay tainted "
            "node.cloudprovider.kubernetes.io/uninitialized until it runs",
        )
    facts = ctx.facts
    first = eks_or_unread(
        CONDITION, facts, ("ProvidedByEKS", "EKS runs the cloud controller manager itself")
    )
    if first is not None:
        return first
    if facts.external_cloud_provider:
        # Not an error: a ClusterResourceSet (CAPA's default template) may install it.
        return ConditionOut(
            CONDITION,
            "Unknown",
            "NotInstalledByClusterPlugin",
            "the KubeadmControlPlane sets cloud-provider: external, so nodes stay tainted "
            "node.cloudprovider.kubernetes.io/uninitialized (and add-ons unscheduled) until a "
            "cloud controller manager runs; this ClusterPlugin does not install one: set "
            f"{ADDON.spec_path}, or install it otherwise (e.g. a ClusterResourceSet)",
            event="Warning",
        )
    return ConditionOut(
        CONDITION,
        "True",
        "NotRequired",
        "the KubeadmControlPlane does not set cloud-provider: external",
    )


def eks_problem(spec: ClusterPluginSpec, facts: ClusterFacts) -> str | None:
    """Why this cluster cannot have the add-on: EKS runs its own CCM."""
    if not facts.eks:
        return None
    return (
        f"the control plane of {facts.namespace}/{spec.cluster_name} is EKS "
        f"({EKS_CONTROL_PLANE}), which runs its own cloud controller manager: remove "
        "spec.cloudProvider"
    )


ADDON = Addon(
    "cloud-controller-manager",
    plugin,
    spec_path="spec.cloudProvider.aws",
    title="the cloud controller manager",
    release=RELEASE,
    condition=condition,
    cluster_problem=eks_problem,
    owned_values=OWNED,
    makes_load_balancers=True,
)
