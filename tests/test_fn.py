"""Protocol-level tests: build a RunFunctionRequest, run the function, compare the response."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from crossplane.function import logging, resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import duration_pb2, json_format, struct_pb2

from function import fn, respond
from function.plan import DesiredResource, Plan
from function.spec import parse_input
from tests.scenarios import by_name, example, find, staged_control_plane

logging.configure(logging.Level.DISABLED)


def request(
    xr: dict[str, Any],
    *,
    required: dict[str, list[dict[str, Any]]] | None = None,
    observed: dict[str, dict[str, Any]] | None = None,
    step_input: dict[str, Any] | None = None,
) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest(
        observed=fnv1.State(composite=fnv1.Resource(resource=resource.dict_to_struct(xr))),
    )
    for name, items in (required or {}).items():
        for item in items:
            req.required_resources[name].items.add().resource.update(item)
    for name, obj in (observed or {}).items():
        req.observed.resources[name].resource.update(obj)
    if step_input:
        req.input.update(step_input)
    return req


def run(req: fnv1.RunFunctionRequest) -> dict[str, Any]:
    rsp = asyncio.run(fn.FunctionRunner().RunFunction(req, None))
    return json_format.MessageToDict(rsp)


def test_no_plugins_whole_response() -> None:
    """An XR asking for no add-ons: the helm ProviderConfig, requirements, status, conditions."""
    xr = {
        "apiVersion": "clusterplugin.dev/v1alpha1",
        "kind": "ClusterPlugin",
        "metadata": {"name": "bare", "namespace": "team-b"},
        "spec": {"clusterName": "bare"},
    }
    got = run(request(xr))
    want = {
        "meta": {"ttl": "600s"},
        "context": {},
        "desired": {
            "composite": {
                "resource": {"status": {"plugins": []}},
            },
            "resources": {
                "helm-provider-config": {
                    "resource": {
                        "apiVersion": "helm.m.crossplane.io/v1beta1",
                        "kind": "ProviderConfig",
                        "metadata": {"name": "bare-helm"},
                        "spec": {
                            "credentials": {
                                "source": "Secret",
                                "secretRef": {
                                    "namespace": "team-b",
                                    "name": "bare-kubeconfig",
                                    "key": "value",
                                },
                            }
                        },
                    },
                    "ready": "READY_FALSE",
                }
            },
        },
        "conditions": [
            {
                "type": "PluginsReady",
                "status": "STATUS_CONDITION_TRUE",
                "reason": "NoPlugins",
                "message": "the spec asks for no add-ons",
                "target": "TARGET_COMPOSITE",
            },
            {
                "type": "SecurityGroupsReady",
                "status": "STATUS_CONDITION_TRUE",
                "reason": "NotRequired",
                "message": "no add-on needs extra ports",
                "target": "TARGET_COMPOSITE",
            },
            {
                "type": "CloudProviderReady",
                "status": "STATUS_CONDITION_UNKNOWN",
                "reason": "ControlPlaneNotRead",
                "message": "the control plane has not been read yet",
                "target": "TARGET_COMPOSITE",
            },
            {
                "type": "IssuerReady",
                "status": "STATUS_CONDITION_TRUE",
                "reason": "NotRequired",
                "message": "no add-on role trusts a service-account issuer",
                "target": "TARGET_COMPOSITE",
            },
            {
                "type": "ChartsHealthy",
                "status": "STATUS_CONDITION_TRUE",
                "reason": "Healthy",
                "message": "every chart runs the version it was given",
                "target": "TARGET_COMPOSITE",
            },
        ],
        "requirements": {
            "resources": {
                "cluster": {
                    "apiVersion": "cluster.x-k8s.io/v1beta2",
                    "kind": "Cluster",
                    "matchName": "bare",
                    "namespace": "team-b",
                }
            },
            "extraResources": {
                "control-plane": {
                    "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
                    "kind": "KubeadmControlPlane",
                    "matchLabels": {"labels": {"cluster.x-k8s.io/cluster-name": "bare"}},
                },
                "infrastructure": {
                    "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
                    "kind": "AWSCluster",
                    "matchLabels": {"labels": {"cluster.x-k8s.io/cluster-name": "bare"}},
                },
            },
        },
    }
    assert got == want


def test_fatal_whole_response() -> None:
    """Two CNIs: one FATAL result naming the field; desired state passed through untouched."""
    xr = {
        "apiVersion": "clusterplugin.dev/v1alpha1",
        "kind": "ClusterPlugin",
        "metadata": {"name": "bad", "namespace": "team-b"},
        "spec": {"clusterName": "bad", "networking": {"amazonVPC": {}, "calico": {}}},
    }
    req = request(xr)
    req.desired.resources["from-an-earlier-step"].resource.update(
        {"apiVersion": "v1", "kind": "ConfigMap"}
    )
    got = run(req)
    assert got == {
        "meta": {"ttl": "60s"},
        "context": {},
        "desired": {
            "resources": {
                "from-an-earlier-step": {"resource": {"apiVersion": "v1", "kind": "ConfigMap"}}
            }
        },
        "results": [
            {
                "severity": "SEVERITY_FATAL",
                "message": "spec.networking: set at most one of amazonVPC and calico: a cluster runs one CNI",
                "reason": "InvalidInput",
                "target": "TARGET_COMPOSITE",
            }
        ],
    }


BAD_SPECS = [
    ({}, "spec.clusterName: is required"),
    ({"clusterName": "demo", "netkworking": {}}, "spec.netkworking: unknown field"),
    ({"clusterName": "demo", "irsa": {"mode": "Sometimes"}}, "spec.irsa.mode: must be one of"),
    ({"clusterName": "demo", "irsa": {"bucketName": "my.bucket"}}, "spec.irsa.bucketName:"),
    (
        {"clusterName": "demo", "storage": {"ebs": {"values": ["a"]}}},
        "spec.storage.ebs.values: must be an object",
    ),
    (
        {
            "clusterName": "demo",
            "storage": {"ebs": {"values": {"controller": {"serviceAccount": {"name": "x"}}}}},
        },
        "spec.storage.ebs.values.controller.serviceAccount.name: is set by the function",
    ),
    (
        {
            "clusterName": "demo",
            "ingress": {"awsLoadBalancerController": {"values": {"clusterName": "other"}}},
        },
        "spec.ingress.awsLoadBalancerController.values.clusterName: is set by the function",
    ),
    (
        {
            "clusterName": "demo",
            "networking": {
                "amazonVPC": {
                    "values": {
                        "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "x"}}
                    }
                }
            },
        },
        "spec.networking.amazonVPC.values.serviceAccount.annotations.eks.amazonaws.com/role-arn: is set by the function",
    ),
    (
        {
            "clusterName": "demo",
            "irsa": {
                "mode": "External",
                "oidcProviderARN": "arn:aws:iam::111122223333:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/BBB",
            },
        },
        "spec.irsa.issuerURL: is required with oidcProviderARN",
    ),
    (
        {
            "clusterName": "demo",
            "irsa": {
                "mode": "External",
                "issuerURL": "https://oidc.eks.us-west-2.amazonaws.com/id/AAA",
                "oidcProviderARN": "arn:aws:iam::111122223333:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/BBB",
            },
        },
        "spec.irsa.oidcProviderARN: names provider",
    ),
    ({"clusterName": "demo", "region": "mars-1"}, "spec.region:"),
    ({"clusterName": "Demo_1"}, "spec.clusterName:"),
    (
        {"clusterName": "demo", "clusterNamespace": "elsewhere"},
        "spec.clusterNamespace: a namespaced ClusterPlugin",
    ),
    (
        {"clusterName": "demo", "storage": {"efs": {"fileSystemId": "vol-1"}}},
        "spec.storage.efs.fileSystemId:",
    ),
    (
        {"clusterName": "demo", "networking": {"calico": {"encapsulation": "GRE"}}},
        "spec.networking.calico.encapsulation",
    ),
]


@pytest.mark.parametrize(("spec", "field"), BAD_SPECS, ids=[b[1].split(":")[0] for b in BAD_SPECS])
def test_bad_spec_gives_one_fatal_naming_the_field(spec: dict[str, Any], field: str) -> None:
    xr = {
        "apiVersion": "clusterplugin.dev/v1alpha1",
        "kind": "ClusterPlugin",
        "metadata": {"name": "x", "namespace": "team-a"},
        "spec": spec,
    }
    got = run(request(xr))
    results = got.get("results", [])
    assert len(results) == 1
    assert results[0]["severity"] == "SEVERITY_FATAL"
    assert results[0]["message"].startswith(field), results[0]["message"]
    assert "resources" not in got.get("desired", {})
    assert "requirements" not in got


BAD_INPUTS = [
    ({"ttl": {"waiting": "soon"}}, "input.ttl.waiting:"),
    ({"ttl": {"waiting": "20m", "ready": "10m"}}, "input.ttl.waiting: must not be longer than ready"),
    (
        {"charts": {"ebs": {"repository": "ftp://x", "name": "a", "version": "1.0.0"}}},
        "input.charts.ebs.repository:",
    ),
    ({"namePrefix": "Acme_"}, "input.namePrefix:"),
    ({"awsProviderConfig": {"kind": "Other"}}, "input.awsProviderConfig.kind:"),
]


@pytest.mark.parametrize(("step_input", "field"), BAD_INPUTS, ids=[b[1] for b in BAD_INPUTS])
def test_bad_input_gives_one_fatal_naming_the_field(step_input: dict[str, Any], field: str) -> None:
    xr, _ = example("selfhosted-full")
    got = run(request(xr, step_input=step_input))
    assert [r["severity"] for r in got["results"]] == ["SEVERITY_FATAL"]
    assert got["results"][0]["message"].startswith(field), got["results"][0]["message"]


def test_legacy_xr_without_claim_needs_cluster_namespace() -> None:
    xr, _ = example("selfhosted-full")
    xr = copy.deepcopy(xr)
    xr["kind"] = "XClusterPlugin"
    del xr["metadata"]["namespace"]
    got = run(request(xr))
    assert got["results"][0]["message"].startswith("spec.clusterNamespace: is required")


def test_claim_cannot_reach_another_namespace() -> None:
    xr, _ = example("calico-legacy-claim")
    xr = copy.deepcopy(xr)
    xr["spec"]["clusterNamespace"] = "kube-system"
    got = run(request(xr))
    assert got["results"][0]["message"].startswith("spec.clusterNamespace: a claim can only use")
    assert got["results"][0]["target"] == "TARGET_COMPOSITE_AND_CLAIM"


def _stage_request(
    observed_ready: list[str], *, initialized: bool, available: bool
) -> dict[str, Any]:
    """The selfhosted example with the given nodes observed Ready."""
    from function_tools.in_memory_crossplane import InMemoryCrossplane, set_control_plane

    xr, required = example("selfhosted-full")
    required = copy.deepcopy(required)
    set_control_plane(
        find(required, "KubeadmControlPlane"), initialized=initialized, available=available
    )
    world = InMemoryCrossplane(xr, required)
    world.run(12)  # a finished world to borrow observed objects from
    req = request(
        xr,
        required={
            "cluster": [find(required, "Cluster")],
            "control-plane": [find(required, "KubeadmControlPlane")],
            "infrastructure": [find(required, "AWSCluster")],
            "sa-secret": [find(required, "Secret")],
        },
    )
    for name in observed_ready:
        req.observed.resources[name].resource.update(world._observed_object(world.composed[name]))
    return run(req)


def _desired(got: dict[str, Any]) -> dict[str, str]:
    return {n: r.get("ready", "READY_UNSPECIFIED") for n, r in got["desired"]["resources"].items()}


IRSA_BASE = [
    "helm-provider-config",
    "irsa-bucket",
    "irsa-bucket-ownership",
    "irsa-bucket-public-access",
]
IRSA_DOCS = ["irsa-bucket-policy", "irsa-discovery", "irsa-jwks"]
ROLES = ["vpc-cni-role", "ebs-role", "efs-role", "lbc-role", "lbc-policy"]
ATTACHMENTS = [
    "vpc-cni-role-attachment",
    "ebs-role-attachment",
    "efs-role-attachment",
    "lbc-role-attachment",
]


def test_stage_one_bucket_only() -> None:
    got = _stage_request([], initialized=False, available=False)
    assert _desired(got) == dict.fromkeys(IRSA_BASE, "READY_FALSE")
    assert got["desired"]["composite"]["ready"] == "READY_FALSE"
    assert got["meta"]["ttl"] == "30s"


def test_stage_two_documents_after_bucket() -> None:
    got = _stage_request(IRSA_BASE, initialized=False, available=False)
    assert set(_desired(got)) == {*IRSA_BASE, *IRSA_DOCS}
    assert _desired(got)["irsa-bucket"] == "READY_TRUE"


def test_stage_roles_after_oidc_provider_but_no_release_before_initialized() -> None:
    got = _stage_request(
        [*IRSA_BASE, *IRSA_DOCS, "irsa-oidc-provider"], initialized=False, available=False
    )
    names = set(_desired(got))
    assert set(ROLES) <= names
    assert not any(n.endswith("-release") for n in names)
    plugins = {p["name"]: p for p in got["desired"]["composite"]["resource"]["status"]["plugins"]}
    # The issuer is done; the plugin still owns cert-manager and the webhook, which wait for the CNI.
    assert plugins["irsa"]["phase"] == "Installing"
    assert plugins["irsa"]["waitingFor"] == "cni-release Ready"
    assert plugins["vpc-cni"]["phase"] == "Installing"


def test_stage_cni_once_initialized_and_role_ready() -> None:
    got = _stage_request(
        [*IRSA_BASE, *IRSA_DOCS, "irsa-oidc-provider", *ROLES, *ATTACHMENTS],
        initialized=True,
        available=False,
    )
    names = set(_desired(got))
    assert "cni-release" in names
    assert not {"ebs-release", "efs-release", "lbc-release", "cert-manager-release"} & names
    plugins = {p["name"]: p for p in got["desired"]["composite"]["resource"]["status"]["plugins"]}
    assert plugins["ebs-csi"]["waitingFor"] == "control plane available"


def test_stage_cni_and_ccm_once_initialized_but_nothing_else_before_the_ccm() -> None:
    ready = [*IRSA_BASE, *IRSA_DOCS, "irsa-oidc-provider", *ROLES, *ATTACHMENTS, "cni-release"]
    got = _stage_request(ready, initialized=True, available=True)
    names = set(_desired(got))
    # Both run on the host network, so neither waits for the other.
    assert {"ccm-release", "cni-release"} <= names
    assert not {"cert-manager-release", "ebs-release", "pod-identity-webhook-release"} & names
    plugins = {p["name"]: p for p in got["desired"]["composite"]["resource"]["status"]["plugins"]}
    assert plugins["irsa"]["waitingFor"] == "ccm-release Ready"
    assert plugins["cloud-controller-manager"]["phase"] == "Installing"
    assert "aws-cloud-controller-manager" in got["conditions"][2]["message"]
    assert got["conditions"][2]["type"] == "CloudProviderReady"
    assert got["conditions"][2]["reason"] == "Installing"


def test_stage_addons_wait_for_the_webhook() -> None:
    ready = [
        *IRSA_BASE,
        *IRSA_DOCS,
        "irsa-oidc-provider",
        *ROLES,
        *ATTACHMENTS,
        "cni-release",
        "ccm-release",
    ]
    got = _stage_request(ready, initialized=True, available=True)
    names = set(_desired(got))
    assert "cert-manager-release" in names
    assert not {"ebs-release", "pod-identity-webhook-release"} & names
    got = _stage_request(
        [*ready, "cert-manager-release", "pod-identity-webhook-release"],
        initialized=True,
        available=True,
    )
    assert {"ebs-release", "efs-release", "lbc-release"} <= set(_desired(got))


def test_observed_resource_is_kept_when_its_gate_fails_and_facts_are_gone() -> None:
    """The control plane and the AWSCluster vanish: nothing observed may drop out of desired."""
    xr, required = example("selfhosted-full")
    from function_tools.in_memory_crossplane import InMemoryCrossplane

    world = InMemoryCrossplane(xr, required)
    world.run(12)
    assert world.xr_ready
    req = request(xr, observed={n: world._observed_object(c) for n, c in world.composed.items()})
    got = run(req)
    assert set(got["desired"]["resources"]) == set(world.composed)
    # Carried over as observed: the spec is the one that was applied, with the orphan
    # policy, since a cluster that cannot be read may be going away (docs/architecture.md, "The cluster's own deletion").
    release = got["desired"]["resources"]["ebs-release"]["resource"]
    spec = dict(release["spec"])
    assert spec.pop("managementPolicies") == ["Observe", "Create", "Update", "LateInitialize"]
    assert spec == world.composed["ebs-release"].obj["spec"]
    # Every node exists, so nothing is held back: readiness is Crossplane's to derive.
    assert "ready" not in got["desired"]["composite"]


def test_results_only_on_transitions() -> None:
    from function_tools.in_memory_crossplane import InMemoryCrossplane

    xr, required = example("selfhosted-full")
    world = InMemoryCrossplane(xr, required)
    counts = []
    for rec in world.run(24):  # Ready, and the VPC CNI's IRSA restart soaked
        assert rec.response is not None
        counts.append(len([r for r in rec.response.results if r.severity == fnv1.SEVERITY_NORMAL]))
    assert counts[0] > 0
    assert counts[-3:] == [0, 0, 0], counts


def test_ttl_comes_from_the_input() -> None:
    xr, _ = example("selfhosted-full")
    got = run(request(xr, step_input={"ttl": {"waiting": "15s", "ready": "1h"}}))
    assert got["meta"]["ttl"] == "15s"
    assert duration_pb2.Duration(seconds=15).ToJsonString() == "15s"


def test_bucket_override_must_carry_the_xrs_binding() -> None:
    """A freely named bucket could be another tenant's issuer (SECURITY.md): refused."""
    from function.names import Names

    xr, required = example("selfhosted-full")
    xr = copy.deepcopy(xr)
    victim = Names("", "team-b", "demo").bucket
    # The attacker's own 6-hex binding is not enough: it could be searched for.
    for name in (victim, "my-bucket", f"x{Names('', 'team-a', 'demo').bucket[-7:]}"):
        xr["spec"]["irsa"] = {"bucketName": name}
        got = run(request(xr))
        assert got["results"][0]["message"].startswith(f"spec.irsa.bucketName: {name!r} must end with")
    own = "acme-issuer" + Names("", "team-a", "demo").override_suffix
    xr["spec"]["irsa"] = {"bucketName": own}
    got = run(request(xr, required={"infrastructure": [find(required, "AWSCluster")]}))
    assert "results" not in got or all(r["severity"] != "SEVERITY_FATAL" for r in got["results"])
    assert got["desired"]["resources"]["irsa-bucket"]["resource"]["metadata"]["annotations"][
        "crossplane.io/external-name"
    ] == own


def test_an_earlier_steps_resource_of_one_of_our_names_is_replaced_whole() -> None:
    """Desired resources of earlier pipeline steps pass through; one named like ours is ours."""
    world = by_name("selfhosted-full").world()
    world.run(30, before=staged_control_plane(3, 8))
    req = world.request()
    fn.run(req)  # the required-resources loop: fill what the function asks for
    world._fill(req, fn.run(req))
    alone = fn.run(req)
    assert "cni-release" in alone.desired.resources
    req.desired.resources["helm-provider-config"].resource.update(
        {"kind": "ConfigMap", "data": {"stale": "yes"}}
    )
    # A Release too: day two builds the rest in the response's own Structs (respond.DesiredSlots).
    req.desired.resources["cni-release"].resource.update(
        {"kind": "ConfigMap", "data": {"stale": "yes"}}
    )
    req.desired.resources["from-an-earlier-step"].resource.update({"kind": "ConfigMap"})
    got = fn.run(req)
    assert got.desired.resources["from-an-earlier-step"].resource == resource.dict_to_struct(
        {"kind": "ConfigMap"}
    )
    del got.desired.resources["from-an-earlier-step"]
    for name in ("helm-provider-config", "cni-release"):
        assert "data" not in resource.struct_to_dict(got.desired.resources[name].resource)
    assert got.desired == alone.desired


@pytest.mark.parametrize("step", [8, 14, 30])
def test_releases_built_in_the_response_answer_as_built_apart(
    monkeypatch: pytest.MonkeyPatch, step: int
) -> None:
    """Building Releases in the response's own Structs (no copy) changes nothing in the answer.

    Installing (8), converging (14) and converged (30): the same request answered with every
    Release built in a Struct of its own and copied, as before that saving.
    """
    world = by_name("selfhosted-full").world()
    world.run(step, before=staged_control_plane(3, 8))
    req = world.request()
    world._fill(req, fn.run(req))
    in_place = fn.run(req, now=1_000.0)
    releases = [n for n, d in in_place.desired.resources.items() if "release" in n]
    assert releases, sorted(in_place.desired.resources)
    monkeypatch.setattr(respond.DesiredSlots, "struct_for", lambda _self, _name: struct_pb2.Struct())
    assert fn.run(req, now=1_000.0) == in_place


def test_a_release_built_in_the_response_but_not_planned_is_not_desired() -> None:
    """The guard behind building in the response: what the plan leaves out is removed."""
    rsp = fnv1.RunFunctionResponse()
    slots = respond.DesiredSlots(rsp)
    slots.struct_for("kept").fields["kind"].string_value = "Release"
    slots.struct_for("dropped").fields["kind"].string_value = "Release"
    plan = Plan()
    plan.resources.append(DesiredResource("kept", True, {"kind": "Release"}))
    respond.write(rsp, plan, parse_input(None), fnv1.TARGET_COMPOSITE, slots)
    assert set(rsp.desired.resources) == {"kept"}


def test_a_calls_context_cannot_be_written_once_built() -> None:
    """Each stage hands the next a new context (plan.build_plan): none is written into."""
    import dataclasses

    from function import accept, cluster
    from function.graph import Readiness
    from function.observed import Observed

    xr, required = example("selfhosted-full")
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    accepted = accept.accept_xr(req.observed.composite.resource, req.input)
    asked = cluster.requirements(req, accepted.lookup)
    ctx = accepted.context(cluster.read_facts(req, accepted.lookup, asked), Observed(req.observed.resources))
    for name, value in (("readiness", {"x": Readiness.EXISTS}), ("chart_versions", {}), ("moving", frozenset())):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(ctx, name, value)
    later = dataclasses.replace(ctx, moving=frozenset({"lbc-release"}))
    assert (ctx.moving, later.moving) == (frozenset(), frozenset({"lbc-release"}))
