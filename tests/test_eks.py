"""EKS as a target (docs/architecture.md, "EKS"): the External issuer read from the
AWSManagedControlPlane, and EKS Pod Identity."""

from __future__ import annotations

from typing import Any

import pytest

from function import fn, structs
from function.addons.pod_identity import addon_registry
from function_tools.in_memory_crossplane import InMemoryCrossplane
from tests.scenarios import (
    AGENT_MIRROR,
    EKS_ISSUER,
    EKS_PROVIDER,
    by_name,
    find,
    staged_control_plane,
    usage_order_problems,
)


def _control_plane(world: InMemoryCrossplane) -> dict[str, Any]:
    return find(world.required, "AWSManagedControlPlane")


def _plugin(world: InMemoryCrossplane, name: str) -> dict[str, Any]:
    return next(p for p in world.xr["status"]["plugins"] if p["name"] == name)


def test_the_issuer_left_out_is_the_control_planes_once_capa_wrote_it() -> None:
    world = by_name("external-eks").world(staged=False)
    cp = _control_plane(world)
    arn = cp["status"].pop("oidcProvider")["arn"]
    for rec in world.run(4):
        assert rec.fatal is None, rec.fatal
    # Nothing trusts a provider not known yet: the roles wait, saying for what.
    assert not any(name.endswith("-role") for name in world.composed)
    assert _plugin(world, "vpc-cni")["waitingFor"] == "AWSManagedControlPlane status.oidcProvider.arn"
    assert "issuerURL" not in world.xr["status"]
    assert not world.xr_ready
    cp["status"]["oidcProvider"] = {"arn": arn}
    world.run(12)
    assert world.xr_ready and not world.deletions
    assert world.xr["status"]["issuerURL"] == EKS_ISSUER
    assert world.xr["status"]["oidcProviderARN"] == EKS_PROVIDER == arn


def test_given_and_read_issuers_compose_the_same() -> None:
    read = by_name("external-eks").world(staged=False)
    given = by_name("external-eks-given").world(staged=False)
    read.run(12)
    given.run(12)
    assert read.xr_ready and given.xr_ready
    assert {n: c.obj for n, c in read.composed.items()} == {
        n: c.obj for n, c in given.composed.items()
    }


# --- EKS Pod Identity (spec.irsa.mode: PodIdentity) -------------------------------------

ROLES = ("vpc-cni-role", "ebs-role", "lbc-role")
RELEASE_OF = {"vpc-cni-role": "cni-release", "ebs-role": "ebs-release", "lbc-role": "lbc-release"}
AGENT = "pod-identity-agent-release"


def _first_seen(world: InMemoryCrossplane, steps: int = 30) -> dict[str, int]:
    first: dict[str, int] = {}
    for rec in world.run(steps, before=staged_control_plane()):
        assert rec.fatal is None, rec.fatal
        for name in rec.created:
            first.setdefault(name, rec.step)
    assert world.xr_ready and not world.deletions
    return first


@pytest.mark.parametrize(
    "name", ["eks-pod-identity-agent-release", "eks-pod-identity-legacy", "eks-pod-identity-legacy-v1"]
)
def test_agent_then_role_association_release(name: str) -> None:
    """The agent's Release first; then per add-on its role, its association once the role and
    the agent are Ready, and its Release once the association is: EKS injects credentials
    only into pods created after their association, served by the agent on their node."""
    world = by_name(name).world()
    first = _first_seen(world)
    ready = {n: c.created_at for n, c in world.composed.items()}
    assert ready
    for role in ROLES:
        association = f"{role}-association"
        assert first[role] < first[association] < first[RELEASE_OF[role]], first
        assert first[AGENT] < first[association], first
    assert not any(n.startswith(("irsa-", "cert-manager", "pod-identity-webhook")) for n in first)


def test_a_release_waits_for_its_association_saying_so() -> None:
    world = by_name("eks-pod-identity-agent-release").world(staged=False)
    world.slow = {"PodIdentityAssociation": 6}
    world.run(4)
    assert "vpc-cni-role-association" in world.composed and "cni-release" not in world.composed
    assert _plugin(world, "vpc-cni")["waitingFor"] == "vpc-cni-role-association Ready"
    world.run(10)
    assert world.xr_ready


def test_capas_agent_add_on_is_waited_for_until_active() -> None:
    """With the agent in the AWSManagedControlPlane's spec.addons nothing installs it again;
    the associations wait until CAPA reports the add-on ACTIVE."""
    world = by_name("eks-pod-identity").world(staged=False)
    cp = _control_plane(world)
    cp["status"]["addons"][0]["status"] = "CREATING"
    world.run(5)
    assert AGENT not in world.composed
    assert not any(n.endswith("-association") for n in world.composed)
    assert _plugin(world, "vpc-cni")["waitingFor"] == "EKS add-on eks-pod-identity-agent ACTIVE"
    assert "CAPA installs" in _plugin(world, "pod-identity-agent")["message"]
    cp["status"]["addons"][0]["status"] = "ACTIVE"
    world.run(10)
    assert world.xr_ready
    assert {f"{r}-association" for r in ROLES} <= set(world.composed)
    assert world.xr["status"]["podIdentityCluster"] == "prod"


def test_capas_agent_is_not_ready_before_capa_reports_it_active() -> None:
    """The agent's entry has no resources of its own: it takes its phase from what it waits for,
    as CAPA reports the add-on (nothing, CREATING, ACTIVE), never Ready while the others wait
    for the agent."""
    world = by_name("eks-pod-identity").world()
    seen = []
    staged = staged_control_plane()
    for _ in range(12):
        (rec,) = world.run(1, before=staged)
        assert rec.fatal is None, rec.fatal
        reported = _control_plane(world)["status"].get("addons") or [{"status": "-"}]
        agent = _plugin(world, "pod-identity-agent")
        others = {p.get("waitingFor") for p in world.xr["status"]["plugins"] if p is not agent}
        waited = "EKS add-on eks-pod-identity-agent ACTIVE" in others
        seen.append((rec.step, reported[0]["status"], agent["phase"], agent.get("waitingFor"), waited))
        assert not (waited and agent["phase"] == "Ready"), seen[-1]
    pending = ("Pending", "EKS add-on eks-pod-identity-agent ACTIVE")
    assert [s[1:4] for s in seen] == [
        *[("-", *pending)] * 2,
        *[("CREATING", *pending)] * 5,
        *[("ACTIVE", "Ready", None)] * 5,
    ]
    assert world.xr_ready


@pytest.mark.parametrize("name", ["eks-pod-identity-agent-release", "eks-pod-identity-legacy"])
def test_moving_the_agent_to_capas_add_on_orphans_its_release(name: str) -> None:
    """The agent's chart, then the AWSManagedControlPlane lists the EKS add-on: the Release takes
    the orphan policy and goes without a helm uninstall, after the Usages of it, so the DaemonSet
    both name stays for CAPA's add-on (an uninstall would delete it under the add-on)."""
    world = by_name(name).world(staged=False)
    world.run(12)
    assert world.xr_ready and AGENT in world.composed
    cp = _control_plane(world)
    cp["spec"]["addons"] = [{"name": "eks-pod-identity-agent", "version": "v1.3.10-eksbuild.2"}]
    cp["status"]["addons"] = [{"name": "eks-pod-identity-agent", "status": "ACTIVE"}]
    gone: dict[str, int] = {}
    for rec in world.run(10):
        assert rec.fatal is None, rec.fatal
        gone.update(dict.fromkeys(rec.deleted, rec.step))
    assert AGENT in gone
    assert world.uninstalls == []
    assert world.deleted_in_use == []
    assert usage_order_problems(world) == []
    # Only the agent's Release and its Usages went; every add-on stays installed.
    assert {n for n in gone if not n.startswith("usage-")} == {AGENT}
    assert all(n.endswith(f"-{AGENT}") for n in gone if n.startswith("usage-"))
    assert world.xr_ready
    assert _plugin(world, "pod-identity-agent")["phase"] == "Ready"


@pytest.mark.parametrize(
    ("name", "registry"),
    [
        ("eks-pod-identity-agent-release", "602401143452.dkr.ecr.us-west-2.amazonaws.com"),
        ("eks-pod-identity-agent-govcloud", "013241004608.dkr.ecr.us-gov-west-1.amazonaws.com"),
        ("eks-pod-identity-agent-mirror", AGENT_MIRROR),
    ],
)
def test_the_agents_image_comes_from_the_regions_registry_or_the_mirror(name: str, registry: str) -> None:
    world = by_name(name).world(staged=False)
    world.run(3)
    values = world.composed[AGENT].obj["spec"]["forProvider"]["values"]
    assert values["image"] == {"containerRegistry": registry}


def test_the_registry_table_follows_the_eks_user_guide() -> None:
    # Opt-in regions have accounts of their own; the guide prints ap-east-2's host as ap-east-1.
    assert addon_registry("eu-south-1") == "590381155156.dkr.ecr.eu-south-1.amazonaws.com"
    assert addon_registry("ap-east-2") == "533267051163.dkr.ecr.ap-east-2.amazonaws.com"
    assert addon_registry("us-gov-east-1") == "151742754352.dkr.ecr.us-gov-east-1.amazonaws.com"
    assert addon_registry("eu-west-1") == "602401143452.dkr.ecr.eu-west-1.amazonaws.com"
    # No Pod Identity in China; a region the table does not know needs the step input's mirror.
    assert addon_registry("cn-north-1") is None
    assert addon_registry("ap-southeast-9") is None


def test_removing_an_add_on_withdraws_release_association_role_in_that_order() -> None:
    world = by_name("eks-pod-identity-agent-release").world(staged=False)
    world.run(12)
    assert world.xr_ready
    del world.xr["spec"]["storage"]
    gone: dict[str, int] = {}
    for rec in world.run(16):
        for name in rec.deleted:
            gone.setdefault(name, rec.step)
    assert world.deleted_in_use == []
    assert usage_order_problems(world) == []
    assert gone["ebs-release"] < gone["ebs-role-association"] < gone["ebs-role"], gone
    assert gone["ebs-role-attachment"] < gone["ebs-role"], gone
    assert AGENT in world.composed  # still used by the other add-ons


def test_moving_roles_in_use_between_irsa_and_pod_identity_is_refused() -> None:
    """As with the issuer's hosting: a cluster whose add-ons use one mechanism keeps it."""
    world = by_name("eks-pod-identity").world(staged=False)
    world.run(12)
    assert world.xr["status"]["podIdentityCluster"] == "prod"
    world.xr["spec"]["irsa"] = {"mode": "External"}
    cp = _control_plane(world)
    cp["spec"]["associateOIDCProvider"] = True
    cp["status"]["oidcProvider"] = {"arn": EKS_PROVIDER}
    rec = world.reconcile()
    assert rec.fatal is not None
    assert rec.fatal.startswith(
        "spec.irsa.mode: would move the add-on roles from EKS Pod Identity to IRSA (External)"
    ), rec.fatal
    assert world.deletions == []

    irsa = by_name("external-eks").world(staged=False)
    irsa.run(12)
    irsa.xr["spec"]["irsa"] = {"mode": "PodIdentity"}
    rec = irsa.reconcile()
    assert rec.fatal is not None
    assert rec.fatal.startswith(
        "spec.irsa.mode: would move the add-on roles from IRSA to EKS Pod Identity, but IRSA "
        f"is in use (status.oidcProviderARN {EKS_PROVIDER})"
    ), rec.fatal


def test_an_association_stuck_at_409_says_what_to_do() -> None:
    """provider-upjet-aws#2199: the provider lost the id of the association it created and keeps
    creating it; EKS answers 409. The plugin is Blocked, naming the association and the
    annotation that makes the provider adopt it."""
    world = by_name("eks-pod-identity").world(staged=False)
    world.run(2)
    assert "vpc-cni-role-association" in world.composed
    req = world.request()
    association = req.observed.resources["vpc-cni-role-association"].resource
    message = (
        "async create failed: resource creation call returned error diags: creating Amazon EKS "
        '(Elastic Kubernetes) Pod Identity Association ("a-stubassocid123456"): operation error '
        "EKS: CreatePodIdentityAssociation, https response error StatusCode: 409, RequestID: "
        "f9cb61ba, ResourceInUseException: Association already exists: a-dt1bedfjc72dlwp5n"
    )
    structs.update(
        association,
        {
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "Creating"},
                    {"type": "Synced", "status": "False", "reason": "ReconcileError", "message": message},
                ]
            }
        },
    )
    rsp = fn.run(req)
    status = structs.to_python(rsp.desired.composite.resource.fields["status"])
    cni = next(p for p in status["plugins"] if p["name"] == "vpc-cni")
    name = association.fields["metadata"].struct_value.fields["name"].string_value
    assert cni["phase"] == "Blocked"
    assert cni["message"] == (
        "vpc-cni-role-association: EKS already has this association (a-dt1bedfjc72dlwp5n) but the "
        "provider lost its id and retries the create forever (Synced=False: 409 Association "
        "already exists; crossplane-contrib/provider-upjet-aws#2199): adopt it with kubectl "
        f"annotate podidentityassociations.eks.aws.m.upbound.io -n payments {name} "
        "crossplane.io/external-name=a-dt1bedfjc72dlwp5n"
    )
    summary = next(c for c in rsp.conditions if c.type == "PluginsReady")
    assert summary.reason == "Blocked"
