"""The AWS cloud controller manager (docs/architecture.md, "The cloud controller manager"): order, image tag, status, refusals."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crossplane.function import resource

from function.addons import ccm
from function.cluster import external_cloud_provider
from function_tools.in_memory_crossplane import InMemoryCrossplane
from tests.scenarios import SCENARIOS, by_name, example, find, staged_control_plane

# EKS runs its own.
CCM_SCENARIOS = [s for s in SCENARIOS if s.example not in {"external-eks", "eks-pod-identity", "eks-pod-identity-legacy"}]
# Everything that runs ordinary pods: it cannot schedule on nodes the CCM has not initialized.
WAIT_FOR_CCM = (
    "cert-manager-release",
    "pod-identity-webhook-release",
    "ebs-release",
    "efs-release",
    "lbc-release",
)


def _release_values(world: InMemoryCrossplane, name: str = ccm.RELEASE.node) -> dict[str, Any]:
    return world.composed[name].obj["spec"]["forProvider"]["values"]


def _kcp(world: InMemoryCrossplane) -> dict[str, Any]:
    return find(world.required, "KubeadmControlPlane")


def _set_version(world: InMemoryCrossplane, wanted: str, running: str | None = None) -> None:
    kcp = _kcp(world)
    kcp["spec"]["version"] = wanted
    kcp.setdefault("status", {})["version"] = running or wanted


@pytest.mark.parametrize("scenario", CCM_SCENARIOS, ids=[s.name for s in CCM_SCENARIOS])
def test_ccm_first_then_everything_that_needs_initialized_nodes(scenario) -> None:
    world = scenario.world()
    first: dict[str, int] = {}
    ready: dict[str, int] = {}
    initialized_at = 3
    for rec in world.run(30, before=staged_control_plane(initialized_at, 8)):
        assert rec.fatal is None, rec.fatal
        for name in rec.created:
            first.setdefault(name, rec.step)
        for name, c in world.composed.items():
            if c.ready:
                ready.setdefault(name, rec.step + 1)
    assert world.xr_ready and not world.deletions
    assert first[ccm.RELEASE.node] == initialized_at, "the CCM waits only for an initialized control plane"
    for name in WAIT_FOR_CCM:
        if name in first:
            assert first[name] >= ready[ccm.RELEASE.node], f"{name} appeared before the CCM was Ready"
    assert any(name in first for name in WAIT_FOR_CCM)


def test_the_cni_does_not_wait_for_the_ccm() -> None:
    world = by_name("calico-legacy-claim").world()
    world.held_down = {ccm.RELEASE.node}
    world.run(12, before=lambda w: (staged_control_plane(3, 8)(w), w.held_down.add(ccm.RELEASE.node)))
    # Kubernetes 1.33: tigera-operator v3.31.7, whose chart carries Calico's CRDs.
    assert "cni-release" in world.composed and "calico-crds-release" not in world.composed
    assert not set(WAIT_FOR_CCM) & set(world.composed)
    plugins = {p["name"]: p for p in world.xr["status"]["plugins"]}
    assert plugins["ebs-csi"]["waitingFor"] == "ccm-release Ready"
    assert plugins["cloud-controller-manager"]["phase"] == "Installing"


def test_owned_values() -> None:
    world = by_name("selfhosted-full").world(staged=False)
    world.run(12)
    values = _release_values(world)
    assert values["hostNetworking"] is True
    assert values["args"] == [
        "--v=2",
        "--cloud-provider=aws",
        "--cluster-name=demo",
        "--configure-cloud-routes=false",
    ]
    assert values["namespace"] == "kube-system" == world.composed[ccm.RELEASE.node].obj["spec"]["forProvider"]["namespace"]
    assert world.composed[ccm.RELEASE.node].obj["spec"]["forProvider"]["wait"] is True
    assert world.composed[ccm.RELEASE.node].obj["metadata"]["annotations"]["crossplane.io/external-name"] == "aws-cloud-controller-manager"


@pytest.mark.parametrize(("minor", "tag"), sorted(ccm.IMAGE_TAGS.items()))
@pytest.mark.parametrize("example_name", ["selfhosted-full", "calico-legacy-claim"])
def test_image_tag_follows_the_control_planes_minor(example_name, minor, tag) -> None:
    scenario = by_name(example_name)
    world = scenario.world(staged=False)
    _set_version(world, f"v{minor[0]}.{minor[1]}.0")
    world.run(4)
    assert _release_values(world)["image"] == {"tag": tag}


def test_the_table_is_the_newest_patch_per_minor_from_1_27() -> None:
    # domain-facts.md section 8: tags of kubernetes/cloud-provider-aws, 2026-11.
    assert ccm.IMAGE_TAGS == {
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
    for (major, minor), tag in ccm.IMAGE_TAGS.items():
        assert tag.startswith(f"v{major}.{minor}.")


def test_an_upgrade_moves_the_tag_in_place_once_the_control_plane_runs_the_new_minor() -> None:
    world = by_name("selfhosted-full").world(staged=False)
    world.run(15)
    assert world.xr_ready
    created_at = world.composed[ccm.RELEASE.node].created_at
    assert _release_values(world)["image"]["tag"] == "v1.33.4"

    # The KubeadmControlPlane is told 1.34; its machines still run 1.33: a CCM newer than
    # its API server is outside the skew policy, so the tag waits for the rollout.
    _set_version(world, "v1.34.1", running="v1.33.0")
    world.run(2)
    assert _release_values(world)["image"]["tag"] == "v1.33.4"

    _set_version(world, "v1.34.1")
    rec = world.reconcile()
    assert _release_values(world)["image"]["tag"] == "v1.34.3"
    assert ccm.RELEASE.node not in rec.created and ccm.RELEASE.node not in rec.deleted
    assert world.composed[ccm.RELEASE.node].created_at == created_at
    world.run(3)
    assert world.deletions == []
    assert world.xr_ready


def test_running_version_from_status_versions_when_status_version_is_gone() -> None:
    world = by_name("selfhosted-full").world(staged=False)
    kcp = _kcp(world)
    kcp["spec"]["version"] = "v1.35.0"
    kcp["status"].pop("version", None)
    kcp["status"]["versions"] = [
        {"version": "v1.35.0", "replicas": 1},
        {"version": "v1.34.2", "replicas": 2},
    ]
    world.run(4)
    assert _release_values(world)["image"]["tag"] == "v1.34.3"


def test_an_unknown_minor_uses_the_charts_default_tag_and_says_so() -> None:
    world = by_name("selfhosted-full").world(staged=False)
    _set_version(world, "v1.38.0")
    world.run(15)
    assert "image" not in _release_values(world)
    plugin = next(p for p in world.xr["status"]["plugins"] if p["name"] == ccm.ADDON.name)
    assert plugin["phase"] == "Ready"
    assert "Kubernetes v1.38.0 is outside this function's CCM version table" in plugin["message"]
    assert "spec.cloudProvider.aws.values.image.tag" in plugin["message"]
    assert world.xr_ready

    # Pinned by the user: used as given, and nothing more to say.
    world.xr["spec"]["cloudProvider"]["aws"]["values"] = {"image": {"tag": "v1.38.0"}}
    world.run(12)  # an upgrade with new values: written, run, soaked
    assert _release_values(world)["image"] == {"tag": "v1.38.0"}
    plugin = next(p for p in world.xr["status"]["plugins"] if p["name"] == ccm.ADDON.name)
    assert "message" not in plugin
    assert world.deletions == []


def test_a_missing_control_plane_read_keeps_the_release_as_it_was() -> None:
    world = by_name("selfhosted-full").world(staged=False)
    world.run(15)
    before = copy.deepcopy(world.composed[ccm.RELEASE.node].obj["spec"]["forProvider"])
    world.hidden = {"KubeadmControlPlane/demo-control-plane"}
    world.run(2)
    assert world.composed[ccm.RELEASE.node].obj["spec"]["forProvider"] == before
    assert world.deletions == []


def test_the_ccm_has_no_iam_role() -> None:
    with_ccm = by_name("selfhosted-full").world(staged=False)
    without = by_name("selfhosted-full").world(staged=False)
    del without.xr["spec"]["cloudProvider"]
    with_ccm.run(15)
    without.run(15)
    assert set(with_ccm.composed) - set(without.composed) == {ccm.RELEASE.node}
    assert with_ccm.xr["status"]["roleARNs"] == without.xr["status"]["roleARNs"]
    kinds = {c.obj["kind"] for n, c in with_ccm.composed.items() if "ccm" in n}
    assert kinds == {"Release"}


def _condition(world: InMemoryCrossplane, typ: str = "CloudProviderReady") -> dict[str, Any]:
    return next(c for c in world.xr["status"]["conditions"] if c["type"] == typ)


def test_external_cloud_provider_without_spec_is_said_in_the_status_not_an_error() -> None:
    world = by_name("selfhosted-full").world(staged=False)
    del world.xr["spec"]["cloudProvider"]
    recs = world.run(15)
    assert all(r.fatal is None for r in recs)
    cond = _condition(world)
    assert (cond["status"], cond["reason"]) == ("Unknown", "NotInstalledByClusterPlugin")
    assert "cloud-provider: external" in cond["message"]
    assert "spec.cloudProvider.aws" in cond["message"]
    warnings = [
        r.message
        for rec in recs
        for r in rec.response.results
        if r.reason == "NotInstalledByClusterPlugin"
    ]
    assert len(warnings) == 1, "a warning on the transition, not on every call"
    # A ClusterResourceSet may install it: the add-ons do not wait for it.
    assert world.xr_ready


def test_condition_when_installed_and_when_not_needed() -> None:
    world = by_name("selfhosted-full").world(staged=False)
    world.run(15)
    assert (_condition(world)["status"], _condition(world)["reason"]) == ("True", "Installed")

    world = by_name("selfhosted-full").world(staged=False)
    del world.xr["spec"]["cloudProvider"]
    config = _kcp(world)["spec"]["kubeadmConfigSpec"]
    config["clusterConfiguration"].pop("controllerManager")
    config.pop("initConfiguration")
    config.pop("joinConfiguration")
    world.run(15)
    assert (_condition(world)["status"], _condition(world)["reason"]) == ("True", "NotRequired")


def _kcp_with(api_version: str, where: tuple[str, ...], value: str) -> Any:
    kcp: dict[str, Any] = {"apiVersion": api_version, "kind": "KubeadmControlPlane", "spec": {}}
    node = kcp["spec"].setdefault("kubeadmConfigSpec", {})
    *parents, last = where
    for p in parents:
        node = node.setdefault(p, {})
    if api_version.endswith("v1beta1"):
        node[last] = {"v": "2", "cloud-provider": value}
    else:
        node[last] = [{"name": "v", "value": "2"}, {"name": "cloud-provider", "value": value}]
    s = resource.dict_to_struct(kcp)
    return s


@pytest.mark.parametrize(
    "where",
    [
        ("clusterConfiguration", "controllerManager", "extraArgs"),
        ("initConfiguration", "nodeRegistration", "kubeletExtraArgs"),
        ("joinConfiguration", "nodeRegistration", "kubeletExtraArgs"),
    ],
)
@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_cloud_provider_external_in_maps_and_lists(where, version) -> None:
    api = f"controlplane.cluster.x-k8s.io/{version}"
    assert external_cloud_provider(_kcp_with(api, where, "external"))
    assert not external_cloud_provider(_kcp_with(api, where, "aws"))


def test_cloud_provider_on_the_api_server_alone_does_not_count() -> None:
    # It does nothing there since 1.31 (and stops the API server since 1.33): only
    # kubelets and the controller manager decide whether nodes wait for a CCM.
    kcp = _kcp_with(
        "controlplane.cluster.x-k8s.io/v1beta2",
        ("clusterConfiguration", "apiServer", "extraArgs"),
        "external",
    )
    assert not external_cloud_provider(kcp)


def test_the_examples_follow_capas_default_template() -> None:
    for name in ("selfhosted-full", "calico-legacy-claim"):
        xr, required = example(name)
        assert xr["spec"]["cloudProvider"] == {"aws": {}}
        kcp = resource.dict_to_struct(find(required, "KubeadmControlPlane"))
        assert external_cloud_provider(kcp)
        args = str(find(required, "KubeadmControlPlane")["spec"]["kubeadmConfigSpec"]["clusterConfiguration"].get("apiServer", {}))
        assert "cloud-provider" not in args


@pytest.mark.parametrize("crossplane_v1", [False, True])
def test_refused_on_eks_with_one_fatal_naming_the_field(crossplane_v1) -> None:
    scenario = by_name("external-eks")
    world = scenario.world(staged=False)
    world.crossplane_v1 = crossplane_v1
    if crossplane_v1:
        world.step_input = {"clusterAPI": {"legacyControlPlaneKind": "AWSManagedControlPlane"}}
    world.xr["spec"]["cloudProvider"] = {"aws": {}}
    rec = world.reconcile()
    assert rec.fatal is not None
    assert rec.fatal.startswith("spec.cloudProvider.aws: ")
    assert "EKS" in rec.fatal
    fatals = [r for r in rec.response.results if r.severity == 1]  # SEVERITY_FATAL
    assert len(fatals) == 1
    assert world.composed == {}


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"args": ["--v=4"]}, "spec.cloudProvider.aws.values.args"),
        ({"hostNetworking": False}, "spec.cloudProvider.aws.values.hostNetworking"),
        ({"namespace": "other"}, "spec.cloudProvider.aws.values.namespace"),
    ],
)
def test_values_the_function_owns_are_refused(values, field) -> None:
    world = by_name("selfhosted-full").world(staged=False)
    world.xr["spec"]["cloudProvider"]["aws"]["values"] = values
    rec = world.reconcile()
    assert rec.fatal is not None and rec.fatal.startswith(f"{field}: ")
    assert world.composed == {}
