"""The EBS and EFS CSI drivers: an IRSA role with the AWS-managed policy, and the chart."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from function.addons.kit import cni, iam
from function.addons.kit.helm import IRSA_ANNOTATION, release, service_account
from function.context import CallContext
from function.graph import Addon, Plugin, Release, Role, Usage
from function.spec_base import FILE_SYSTEM_ID, AddonSpec

# --- its place in the ClusterPlugin spec (function/spec.py frames it) ----------------


class EBSSpec(AddonSpec):
    """AWS EBS CSI driver."""

    default_storage_class: bool = Field(
        default=False,
        alias="defaultStorageClass",
        description="Create a gp3 StorageClass and mark it as the cluster's default.",
    )


class EFSSpec(AddonSpec):
    """AWS EFS CSI driver; a StorageClass is created when fileSystemId is given."""

    file_system_id: str | None = Field(
        default=None,
        alias="fileSystemId",
        description=(
            "An existing EFS file system (fs- followed by hex digits, e.g. fs-0123456789abcdef0): "
            "a StorageClass provisioning access points on it is created. Unset: no StorageClass."
        ),
        json_schema_extra={"pattern": FILE_SYSTEM_ID.pattern},
    )

    @field_validator("file_system_id")
    @classmethod
    def _fs(cls, v: str | None) -> str | None:
        if v is not None and not FILE_SYSTEM_ID.match(v):
            msg = f"{v!r} is not an EFS file system id (fs- followed by hex digits)"
            raise ValueError(msg)
        return v

NAMESPACE = "kube-system"
OWNED = (
    ("controller", "serviceAccount", "name"),
    ("controller", "serviceAccount", "annotations", IRSA_ANNOTATION),
)

EBS_RELEASE = Release(
    "ebs-release",
    lambda charts: charts.ebs,
    NAMESPACE,
    "aws-ebs-csi-driver",
    service_account="ebs-csi-controller-sa",
)
# V2 only manages volumes and snapshots tagged ebs.csi.aws.com/cluster=true, which
# the driver puts on everything it creates. Unlike V1 (and the driver's install doc),
# V2 is not under service-role/: that ARN is NoSuchEntity (AWS's managed-policy list,
# as vendored by moto, has Path "/").
EBS_ROLE = Role(
    "ebs-role", "ebs-csi", status_key="ebs", managed_policy="policy/AmazonEBSCSIDriverPolicyV2"
)
EFS_RELEASE = Release(
    "efs-release",
    lambda charts: charts.efs,
    NAMESPACE,
    "aws-efs-csi-driver",
    service_account="efs-csi-controller-sa",
)
EFS_ROLE = Role(
    "efs-role",
    "efs-csi",
    status_key="efs",
    managed_policy="policy/service-role/AmazonEFSCSIDriverPolicy",
)


def ebs_release(ctx: CallContext) -> dict[str, Any]:
    """aws-ebs-csi-driver; its chart rejects unknown values, so only schema keys are set."""
    spec = EBS.spec(ctx.spec)
    assert spec is not None  # noqa: S101  # plugin() only adds this node when set
    values: dict[str, Any] = {
        "controller": {
            "region": ctx.region,
            "serviceAccount": service_account(
                EBS_RELEASE.service_account, iam.role_arn(ctx, EBS_ROLE)
            ),
        }
    }
    if spec.default_storage_class:
        values["defaultStorageClass"] = {"enabled": True}
    return release(ctx, EBS_RELEASE, values=values, version=spec.version, user_values=spec.values)


def efs_release(ctx: CallContext) -> dict[str, Any]:
    """aws-efs-csi-driver, with a dynamic-provisioning StorageClass when fileSystemId is set."""
    spec = EFS.spec(ctx.spec)
    assert spec is not None  # noqa: S101  # plugin() only adds this node when set
    values: dict[str, Any] = {
        "controller": {
            "serviceAccount": service_account(
                EFS_RELEASE.service_account, iam.role_arn(ctx, EFS_ROLE)
            )
        }
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
    return release(ctx, EFS_RELEASE, values=values, version=spec.version, user_values=spec.values)


_EBS_NODE = EBS_RELEASE.as_node(ebs_release, iam.release_gates(EBS_ROLE))
_EFS_NODE = EFS_RELEASE.as_node(efs_release, iam.release_gates(EFS_ROLE))


def ebs_plugin(ctx: CallContext) -> Plugin | None:
    """The EBS CSI plugin, when wanted."""
    spec = EBS.spec(ctx.spec)
    return None if spec is None else iam.plugin(ctx, EBS, _EBS_NODE, spec)


def efs_plugin(ctx: CallContext) -> Plugin | None:
    """The EFS CSI plugin, when wanted."""
    spec = EFS.spec(ctx.spec)
    return None if spec is None else iam.plugin(ctx, EFS, _EFS_NODE, spec)


def _driver_usages(driver: str, release: Release, role: Role) -> tuple[Usage, ...]:
    return (
        Usage(
            release.node,
            role.node,
            f"the {driver} CSI driver uses this role until it is uninstalled",
        ),
        cni.needed_by(
            release.node, f"pods of the {driver} CSI driver need the CNI until they are gone"
        ),
        *iam.role_usages(role, release.node),
    )


EBS = Addon(
    "ebs-csi",
    ebs_plugin,
    spec_path="spec.storage.ebs",
    title="the EBS CSI driver",
    eks_addon="aws-ebs-csi-driver",
    release=EBS_RELEASE,
    role=EBS_ROLE,
    owned_values=OWNED,
    usages=_driver_usages("EBS", EBS_RELEASE, EBS_ROLE),
)

EFS = Addon(
    "efs-csi",
    efs_plugin,
    spec_path="spec.storage.efs",
    title="the EFS CSI driver",
    eks_addon="aws-efs-csi-driver",
    release=EFS_RELEASE,
    role=EFS_ROLE,
    owned_values=OWNED,
    usages=_driver_usages("EFS", EFS_RELEASE, EFS_ROLE),
)
