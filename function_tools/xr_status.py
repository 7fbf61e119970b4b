"""The status the function writes on a ClusterPlugin, as Pydantic models.

The source of the XRDs' status schema (``make generate``, function_tools/apigen.py): a key the
schema does not name would be pruned by the API server. The function itself writes
plain dicts (function/plan.py, function/deletion.py) and never imports this module; the
tests check every status it writes in every scenario against the generated schema.
Crossplane adds ``status.conditions`` (and, for legacy XRs, the claim's fields) itself.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from function import registry
from function.upgrade import Phase


class _Status(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PluginPhase(StrEnum):
    """Where one add-on stands."""

    PENDING = "Pending"
    INSTALLING = "Installing"
    READY = "Ready"
    BLOCKED = "Blocked"


class PluginEntry(_Status):
    """One entry of ``status.plugins``."""

    name: str | None = Field(
        default=None, description="The add-on, e.g. vpc-cni, calico, ebs-csi or external-dns."
    )
    phase: PluginPhase | None = Field(
        default=None,
        description=(
            "Pending: waiting for something before its resources are composed. Installing: "
            "composed, not yet ready. Ready. Blocked: cannot go on until someone acts "
            "(message says what to do)."
        ),
    )
    waiting_for: str | None = Field(
        default=None,
        alias="waitingFor",
        description="What it waits for, e.g. irsa-oidc-provider ARN or AWSCluster.",
    )
    message: str | None = Field(default=None, description="Details for a person.")
    version: str | None = Field(
        default=None,
        description=(
            "The chart version its Release runs, as helm deployed it "
            "(status.atProvider.version), e.g. 1.22.4."
        ),
    )
    target_version: str | None = Field(
        default=None,
        alias="targetVersion",
        description=(
            "The chart version it moves to: while an upgrade (or a rollback) is under way, or "
            "waits for its turn, its IAM or its dependencies."
        ),
    )
    last_healthy_version: str | None = Field(
        default=None,
        alias="lastHealthyVersion",
        description="The chart version that last ran healthy: where a rollback returns to.",
    )
    upgrade: Phase | None = Field(
        default=None,
        description=(
            "Day two. Healthy: it runs the version it was given and ran through its soak. "
            "Upgrading: a new version (or new values) was written and is not yet running or "
            "soaking. Failed: the upgrade failed and is held (onFailure: Hold), no other chart "
            "moves until a person acts. RollingBack: the upgrade failed and the last healthy "
            "version is being written back. RolledBack: it runs the last healthy version again; "
            "the failed one is not tried again until the spec changes."
        ),
    )
    upgrade_since: str | None = Field(
        default=None,
        alias="upgradeSince",
        description="When the upgrade phase began (Healthy: healthy since), RFC 3339.",
    )


def _role_arns() -> type[_Status]:
    """``status.roleARNs``: one key per add-on role, as the add-ons declare them."""
    fields: dict[str, Any] = {}
    for addon in registry.WITH_ROLES:
        assert addon.role is not None  # noqa: S101  # WITH_ROLES holds add-ons with a role
        title = addon.title
        whose = title[0].upper() + title[1:] if title.startswith("the ") else title
        fields[addon.role.status_key] = (
            str | None,
            Field(default=None, description=f"{whose}'s role."),
        )
    return create_model("RoleARNs", __base__=_Status, __doc__=_role_arns.__doc__, **fields)


if TYPE_CHECKING:
    RoleARNs = _Status
else:
    RoleARNs = _role_arns()


class ClusterDeletionPhase(StrEnum):
    """How far the deletion of the CAPI cluster got, as this ClusterPlugin saw it."""

    DELETING = "Deleting"
    GONE = "Gone"
    DELETED = "Deleted"


class FinalizingResource(_Status):
    """A resource the withdrawal deleted last that its provider may still be deleting."""

    api_version: str | None = Field(default=None, alias="apiVersion", description="Its apiVersion.")
    kind: str | None = Field(default=None, description="Its kind.")
    name: str | None = Field(default=None, description="Its name.")


class ClusterDeletion(_Status):
    """``status.clusterDeletion``."""

    name: str | None = Field(default=None, description="The Cluster's name.")
    uid: str | None = Field(default=None, description="The Cluster's uid.")
    phase: ClusterDeletionPhase | None = Field(
        default=None,
        description=(
            "Deleting: the Cluster is being deleted; the Releases are orphaned (no helm "
            "uninstall) and the AWS resources kept. Gone: the Cluster is no longer found. "
            "Deleted: everything composed is deleted in Usage order, the Releases without an "
            "uninstall (PluginsReady turns ClusterDeleted once nothing is left)."
        ),
    )
    finalizing: list[FinalizingResource] | None = Field(
        default=None,
        description=(
            "Deleted: what the last layer of the withdrawal left to its providers (Crossplane "
            "no longer observes it), asked for by name until the API server no longer has it."
        ),
    )


class AppliedPlugin(_Status):
    """``status.rollout.applied[]``: one add-on's chart version and values from a rollout."""

    name: str | None = Field(default=None, description="The add-on (status.plugins[].name).")
    version: str | None = Field(default=None, description="The chart version it runs.")
    values: dict[str, Any] | None = Field(
        default=None,
        description="The rollout's values, under the ClusterPlugin's own.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class RolloutReport(_Status):
    """``status.rollout``: the ClusterPluginRollout that selects this XR, as it stands here."""

    name: str | None = Field(default=None, description="The ClusterPluginRollout.")
    revision: str | None = Field(default=None, description="Digest of its target.")
    wave: str | None = Field(
        default=None, description="The wave it is admitted in (canary, wave-1, ...)."
    )
    phase: str | None = Field(
        default=None,
        description=(
            "NotAdmitted, Upgrading, Healthy (the target runs, healthy), Failed (its upgrade to "
            "the target failed), Skipped (reason), RolledBack (the rollout rolled back) or Held "
            "(its rollout is refused or no longer selects it: it keeps what it runs; reason)."
        ),
    )
    healthy_since: str | None = Field(
        default=None, alias="healthySince", description="Healthy at the target since (RFC 3339)."
    )
    reason: str | None = Field(
        default=None,
        description="Why not admitted, skipped, failed or held, or what an admitted one waits for.",
    )
    applying: bool | None = Field(
        default=None, description="Skipped or held while it already runs the target: it keeps it."
    )
    applied: list[AppliedPlugin] | None = Field(
        default=None,
        description=(
            "What a rollout makes it run, add-on by add-on: kept while no rollout admits it, so "
            "that a rollout refused, deleted or no longer selecting it moves no chart."
        ),
    )
    conflicts: list[str] | None = Field(
        default=None,
        description="Other ClusterPluginRollouts that select it too (they skip it).",
    )


class ClusterPluginStatus(_Status):
    """What the function writes in a ClusterPlugin's status."""

    issuer_url: str | None = Field(
        default=None,
        alias="issuerURL",
        description=(
            "The cluster's service-account issuer URL, to give the API server as "
            "--service-account-issuer (SelfHosted: the S3 bucket's)."
        ),
    )
    oidc_provider_arn: str | None = Field(
        default=None,
        alias="oidcProviderARN",
        description="The IAM OIDC provider the add-ons' roles trust.",
    )
    pod_identity_cluster: str | None = Field(
        default=None,
        alias="podIdentityCluster",
        description=(
            "EKS Pod Identity (spec.irsa.mode PodIdentity): the EKS cluster whose Pod Identity "
            "associations give the add-on roles to their service accounts, while one exists."
        ),
    )
    role_arns: RoleARNs | None = Field(
        default=None,
        alias="roleARNs",
        description="The IAM role of each add-on that has one, once it exists.",
    )
    cluster_deletion: ClusterDeletion | None = Field(
        default=None,
        alias="clusterDeletion",
        description=(
            "The deletion of the CAPI cluster this ClusterPlugin saw, and how far it got "
            "(kept across calls: it is the function's only memory)."
        ),
    )
    plugins: list[PluginEntry] | None = Field(
        default=None, description="Each wanted add-on and where it stands."
    )
    rollout: RolloutReport | None = Field(
        default=None,
        description=(
            "The ClusterPluginRollout that selects this XR (input.fleet.rollouts): its revision, "
            "the wave this cluster is admitted in and how the target runs here."
        ),
    )
    upgrade: Phase | None = Field(
        default=None,
        description=(
            "Day two, over every chart: Failed, RollingBack, Upgrading or RolledBack when any "
            "plugin is (in that order), else Healthy. status.plugins[] says which and why."
        ),
    )
