"""The EBS and EFS CSI drivers: an IRSA role with the AWS-managed policy, and the chart."""

from __future__ import annotations

from typing import Any

from function.addons.helm import IRSA_ANNOTATION, release, service_account
from function.addons.iam import managed_policy, role_nodes, role_usages
from function.graph import (
    Addon,
    Ctx,
    Node,
    OwnedValues,
    Plugin,
    addon_release_gates,
)
from function.spec import IRSAMode

NAMESPACE = "kube-system"
EBS_SA = "ebs-csi-controller-sa"
EFS_SA = "efs-csi-controller-sa"
EBS_OWNED = (
    ("controller", "serviceAccount", "name"),
    ("controller", "serviceAccount", "annotations", IRSA_ANNOTATION),
)
EFS_OWNED = EBS_OWNED


def _role_arn(ctx: Ctx, role: str) -> str | None:
    return None if ctx.irsa is IRSAMode.DISABLED else ctx.arn_of(role)


def ebs_release(ctx: Ctx) -> dict[str, Any]:
    """aws-ebs-csi-driver; its chart rejects unknown values, so only schema keys are set."""
    spec = ctx.spec.storage.ebs
    assert spec is not None  # noqa: S101  # plugin() only adds this node when set
    values: dict[str, Any] = {
        "controller": {
            "region": ctx.region,
            "serviceAccount": service_account(EBS_SA, _role_arn(ctx, "ebs-role")),
        }
    }
    if spec.default_storage_class:
        values["defaultStorageClass"] = {"enabled": True}
    return release(
        ctx,
        chart=ctx.step.charts.ebs,
        version=spec.version,
        namespace=NAMESPACE,
        release_name="aws-ebs-csi-driver",
        values=values,
        user_values=spec.values,
    )


def efs_release(ctx: Ctx) -> dict[str, Any]:
    """aws-efs-csi-driver, with a dynamic-provisioning StorageClass when fileSystemId is set."""
    spec = ctx.spec.storage.efs
    assert spec is not None  # noqa: S101  # plugin() only adds this node when set
    values: dict[str, Any] = {
        "controller": {"serviceAccount": service_account(EFS_SA, _role_arn(ctx, "efs-role"))}
    }
    if spec.file_system_id:
        values["storageClasses"] = [
            {
                "name": "efs-sc",
                "parameters": {
                    "provisioningMode": "efs-ap",
                    "fileSystemId": spec.file_system_id,
                    "directoryPerms": "700",
                },
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "Immediate",
            }
        ]
    return release(
        ctx,
        chart=ctx.step.charts.efs,
        version=spec.version,
        namespace=NAMESPACE,
        release_name="aws-efs-csi-driver",
        values=values,
        user_values=spec.values,
    )


def _plugin(
    ctx: Ctx, *, name: str, role: str, sa: str, release_node: Node, role_key: str
) -> Plugin:
    nodes: list[Node] = []
    if ctx.irsa is not IRSAMode.DISABLED:
        nodes += role_nodes(
            node=role,
            addon=name,
            namespace=NAMESPACE,
            service_account=sa,
            policy_arn=managed_policy(name),
        )
    nodes.append(release_node)
    return Plugin(name, tuple(nodes), role_key=role_key, role_node=role)


def ebs_plugin(ctx: Ctx) -> Plugin | None:
    """The EBS CSI plugin, when wanted."""
    if ctx.spec.storage.ebs is None:
        return None
    return _plugin(
        ctx,
        name="ebs-csi",
        role="ebs-role",
        sa=EBS_SA,
        release_node=Node("ebs-release", ebs_release, addon_release_gates("ebs-role")),
        role_key="ebs",
    )


def efs_plugin(ctx: Ctx) -> Plugin | None:
    """The EFS CSI plugin, when wanted."""
    if ctx.spec.storage.efs is None:
        return None
    return _plugin(
        ctx,
        name="efs-csi",
        role="efs-role",
        sa=EFS_SA,
        release_node=Node("efs-release", efs_release, addon_release_gates("efs-role")),
        role_key="efs",
    )


def _driver_usages(driver: str, release: str, role: str) -> tuple[tuple[str, str, str], ...]:
    return (
        (release, role, f"the {driver} CSI driver uses this role until it is uninstalled"),
        (
            release,
            "cni-release",
            f"pods of the {driver} CSI driver need the CNI until they are gone",
        ),
        *role_usages(role),
    )


EBS = Addon(
    ebs_plugin,
    owned_values=(OwnedValues("spec.storage.ebs.values", lambda s: s.storage.ebs, EBS_OWNED),),
    usages=_driver_usages("EBS", "ebs-release", "ebs-role"),
)

EFS = Addon(
    efs_plugin,
    owned_values=(OwnedValues("spec.storage.efs.values", lambda s: s.storage.efs, EFS_OWNED),),
    usages=_driver_usages("EFS", "efs-release", "efs-role"),
)
