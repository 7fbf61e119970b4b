"""API flavours: the one place that knows legacy (cluster-scoped) and namespaced kinds.

A namespaced (Crossplane v2) XR may only compose namespaced kinds: the
``*.aws.m.upbound.io`` and ``helm.m.crossplane.io`` groups, whose
``providerConfigRef`` names a kind and which have no ``deletionPolicy``, and
``protection.crossplane.io`` Usages. A legacy XR (Crossplane 1.x, or v2
``LegacyCluster``) composes the cluster-scoped kinds and
``apiextensions.crossplane.io/v1beta1`` Usages.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import struct_pb2

from function import structs

# kind -> (legacy apiVersion, namespaced apiVersion). Versions are each CRD's
# storage version in provider-upjet-aws v2.6.0 / provider-helm v1.4.0 / Crossplane v2.3.
KINDS: dict[str, tuple[str, str]] = {
    "Bucket": ("s3.aws.upbound.io/v1beta2", "s3.aws.m.upbound.io/v1beta1"),
    "BucketOwnershipControls": ("s3.aws.upbound.io/v1beta2", "s3.aws.m.upbound.io/v1beta1"),
    "BucketPublicAccessBlock": ("s3.aws.upbound.io/v1beta1", "s3.aws.m.upbound.io/v1beta1"),
    "BucketPolicy": ("s3.aws.upbound.io/v1beta1", "s3.aws.m.upbound.io/v1beta1"),
    "Object": ("s3.aws.upbound.io/v1beta2", "s3.aws.m.upbound.io/v1beta1"),
    "OpenIDConnectProvider": ("iam.aws.upbound.io/v1beta1", "iam.aws.m.upbound.io/v1beta1"),
    "Role": ("iam.aws.upbound.io/v1beta1", "iam.aws.m.upbound.io/v1beta1"),
    "Policy": ("iam.aws.upbound.io/v1beta1", "iam.aws.m.upbound.io/v1beta1"),
    "RolePolicyAttachment": ("iam.aws.upbound.io/v1beta1", "iam.aws.m.upbound.io/v1beta1"),
    "SecurityGroupIngressRule": ("ec2.aws.upbound.io/v1beta1", "ec2.aws.m.upbound.io/v1beta1"),
    # The cluster-scoped Distribution's v1beta1 is deprecated and of another shape
    # (one-element lists for its objects); v1beta2 is shaped like the namespaced one.
    "Distribution": ("cloudfront.aws.upbound.io/v1beta2", "cloudfront.aws.m.upbound.io/v1beta1"),
    "OriginAccessControl": (
        "cloudfront.aws.upbound.io/v1beta1",
        "cloudfront.aws.m.upbound.io/v1beta1",
    ),
    "Record": ("route53.aws.upbound.io/v1beta2", "route53.aws.m.upbound.io/v1beta1"),
    "PodIdentityAssociation": ("eks.aws.upbound.io/v1beta1", "eks.aws.m.upbound.io/v1beta1"),
    "Release": ("helm.crossplane.io/v1beta1", "helm.m.crossplane.io/v1beta1"),
    "ProviderConfig": ("helm.crossplane.io/v1beta1", "helm.m.crossplane.io/v1beta1"),
    "Usage": ("apiextensions.crossplane.io/v1beta1", "protection.crossplane.io/v1beta1"),
}

# The composite resource API both flavours serve (the XRDs in apis/).
XR_GROUP = "clusterplugin.dev"
XR_VERSION = "v1alpha1"
# On every composed Usage: the name of the XR that composed it. Crossplane strips its own
# crossplane.io/composite label from a composed resource before deleting it, and forgets it
# at once while its finalizers still hold it; with this label the function finds the Usages
# that still exist (function/plan.py, _withdraw_in_usage_order).
USAGE_COMPOSITE_LABEL = f"{XR_GROUP}/composite"


@dataclass(frozen=True)
class XRType:
    """One flavour's composite resource type: what its XRD and Composition declare."""

    namespaced: bool
    kind: str
    plural: str
    # apiextensions.crossplane.io/v2 defines namespaced XRs; v1 the legacy cluster-scoped
    # ones, which Crossplane v2 still serves as scope LegacyCluster.
    xrd_api_version: str
    # spec.scope of the XRD; None leaves it unset, because Crossplane 1.x does not know it.
    scope: str | None
    claim_kind: str | None = None
    claim_plural: str | None = None
    # XR spec fields this flavour does not have: a namespaced XR's Cluster is in its own
    # namespace, so it cannot name another (spec.clusterNamespace).
    omitted_spec_fields: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        """The XR's (and claim's) apiVersion."""
        return f"{XR_GROUP}/{XR_VERSION}"

    @property
    def xrd_name(self) -> str:
        """The XRD's (and its default Composition's) metadata.name."""
        return f"{self.plural}.{XR_GROUP}"

    @property
    def scope_label(self) -> str:
        """The value of the Composition's ``clusterplugin.dev/scope`` label."""
        return "namespaced" if self.namespaced else "legacy-cluster"


NAMESPACED_XR = XRType(
    namespaced=True,
    kind="ClusterPlugin",
    plural="clusterplugins",
    xrd_api_version="apiextensions.crossplane.io/v2",
    scope="Namespaced",
    omitted_spec_fields=("clusterNamespace",),
)
LEGACY_XR = XRType(
    namespaced=False,
    kind="XClusterPlugin",
    plural="xclusterplugins",
    xrd_api_version="apiextensions.crossplane.io/v1",
    scope=None,
    claim_kind="ClusterPlugin",
    claim_plural="clusterplugins",
)
XR_TYPES = (NAMESPACED_XR, LEGACY_XR)

EXTERNAL_NAME = "crossplane.io/external-name"
# Everything but Delete: keep reconciling, and on deletion forget the release.
ORPHAN_MANAGEMENT_POLICIES = ("Observe", "Create", "Update", "LateInitialize")

# Writes a body into an empty Struct: for bodies cheaper to put together in protobuf
StructWriter = Callable[[struct_pb2.Struct], None]


@dataclass(frozen=True)
class Flavour:
    """How composed resources are shaped for one XR."""

    namespaced: bool
    aws_provider_config: str
    aws_provider_config_kind: str
    helm_provider_config: str
    # Releases are deleted without a helm uninstall: the workload cluster is going
    # away, and an uninstall against it would hang (docs/architecture.md, "The
    # cluster's own deletion").
    orphan_releases: bool = False

    def api_version(self, kind: str) -> str:
        """The apiVersion of ``kind`` in this flavour."""
        return KINDS[kind][1 if self.namespaced else 0]

    def _ref(self, name: str, kind: str) -> dict[str, str]:
        return {"name": name, "kind": kind} if self.namespaced else {"name": name}

    def managed(
        self,
        kind: str,
        for_provider: dict[str, Any],
        *,
        external_name: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """An AWS managed resource of ``kind`` on the configured AWS provider config."""
        return self._resource(
            kind,
            {
                "forProvider": for_provider,
                "providerConfigRef": self._ref(
                    self.aws_provider_config, self.aws_provider_config_kind
                ),
            },
            external_name=external_name,
            labels=labels,
        )

    def local_secret_ref(self, name: str, namespace: str | None) -> dict[str, str]:
        """A Secret reference: namespaced kinds read Secrets from their own namespace only."""
        if self.namespaced or not namespace:
            return {"name": name}
        return {"name": name, "namespace": namespace}

    def release(self, spec: dict[str, Any], *, release_name: str) -> dict[str, Any]:
        """A provider-helm Release on the composed helm ProviderConfig."""
        spec = {**spec, "providerConfigRef": self._ref(self.helm_provider_config, "ProviderConfig")}
        if self.orphan_releases:
            spec.update(self._orphan_policy())
        return self._resource("Release", spec, external_name=release_name)

    def _orphan_policy(self) -> dict[str, Any]:
        # Namespaced managed resources have no deletionPolicy: leaving Delete out of
        # the management policies is how they are told not to delete.
        if self.namespaced:
            return {"managementPolicies": list(ORPHAN_MANAGEMENT_POLICIES)}
        return {"deletionPolicy": "Orphan"}

    def orphaned_copy(self, release: struct_pb2.Struct) -> struct_pb2.Struct:
        """An observed Release with the orphan policy set (to carry it over as it is)."""
        out = struct_pb2.Struct()
        out.CopyFrom(release)
        out.fields["spec"].struct_value.update(self._orphan_policy())
        return out

    def is_orphaned(self, release: struct_pb2.Struct) -> bool:
        """Whether an observed Release would be deleted without a helm uninstall."""
        if self.namespaced:
            policies = structs.strings_at(release, "spec", "managementPolicies")
            return bool(policies) and not {"Delete", "*"} & set(policies)
        return structs.str_at(release, "spec", "deletionPolicy") == "Orphan"

    def helm_provider_config_resource(
        self, *, namespace: str, kubeconfig_secret: str
    ) -> dict[str, Any]:
        """The provider-helm ProviderConfig reading the CAPI kubeconfig Secret (key ``value``)."""
        # Both provider-helm CRDs require the Secret's namespace, even the namespaced one.
        secret_ref = {"namespace": namespace, "name": kubeconfig_secret, "key": "value"}
        return {
            "apiVersion": self.api_version("ProviderConfig"),
            "kind": "ProviderConfig",
            # Releases reference it by name, so the name must be known up front.
            "metadata": {"name": self.helm_provider_config},
            "spec": {"credentials": {"source": "Secret", "secretRef": secret_ref}},
        }

    def usage_end(self, t: tuple[str, str, str]) -> struct_pb2.Struct:
        """A Usage's ``of`` or ``by``: ``t`` is (apiVersion, kind, metadata.name) of a resource."""
        ref = struct_pb2.Struct()
        fields = ref.fields
        fields["apiVersion"].string_value = t[0]
        fields["kind"].string_value = t[1]
        fields["resourceRef"].struct_value.fields["name"].string_value = t[2]
        return ref

    def usage(
        self, of: struct_pb2.Struct, by: struct_pb2.Struct, reason: str, composite: str
    ) -> StructWriter:
        """A Usage that blocks deletion of ``of`` while ``by`` exists (ends from ``usage_end``).

        Returned as a writer of ``{"apiVersion", "kind": "Usage", "metadata": {"labels":
        {USAGE_COMPOSITE_LABEL: composite}}, "spec": {"of", "by", "replayDeletion": true,
        "reason"}}``: a call writes up to 21 Usages, and parsing the fixed parts and
        copying the two ends, both in C, costs half of writing them leaf by leaf.
        """
        head = _usage_head(self.api_version("Usage"), reason)
        labels = _usage_labels(composite)

        def write(s: struct_pb2.Struct) -> None:
            s.MergeFromString(head)
            s.MergeFromString(labels)
            spec = s.fields["spec"].struct_value.fields
            spec["of"].struct_value.CopyFrom(of)
            spec["by"].struct_value.CopyFrom(by)

        return write

    def _resource(
        self,
        kind: str,
        spec: dict[str, Any],
        *,
        external_name: str | None,
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        metadata: dict[str, Any] = {}
        if external_name:
            metadata["annotations"] = {EXTERNAL_NAME: external_name}
        if labels:
            metadata["labels"] = labels
        body: dict[str, Any] = {"apiVersion": self.api_version(kind), "kind": kind}
        if metadata:
            body["metadata"] = metadata
        body["spec"] = spec
        return body


def composite_mismatch(xr: Mapping[str, Any], type_ref: Any) -> str | None:
    """Why a Composition of ``type_ref`` (its compositeTypeRef) cannot compose ``xr``, or None."""
    if not isinstance(type_ref, Mapping):
        return None
    want, got = type_ref.get("kind"), xr.get("kind")
    if (want, type_ref.get("apiVersion")) == (got, xr.get("apiVersion")):
        return None
    if (want, got) == (LEGACY_XR.kind, NAMESPACED_XR.kind):
        return (
            f"the flavours differ: this is the legacy Composition (it composes the "
            f"cluster-scoped {LEGACY_XR.kind} of Crossplane 1.x or a v2 LegacyCluster XRD), but "
            f"the XR is a {NAMESPACED_XR.kind}: a namespaced XR of Crossplane v2, or a legacy "
            f"claim. Render the {LEGACY_XR.kind} Crossplane makes for a claim (labels "
            "crossplane.io/claim-name and crossplane.io/claim-namespace), or a namespaced "
            "ClusterPlugin with the namespaced Composition (apis/v2/composition.yaml)"
        )
    if (want, got) == (NAMESPACED_XR.kind, LEGACY_XR.kind):
        return (
            f"the flavours differ: this is the namespaced Composition (it composes the "
            f"namespaced {NAMESPACED_XR.kind} of Crossplane v2), but the XR is a legacy "
            f"cluster-scoped {LEGACY_XR.kind}: use the legacy Composition "
            "(apis/v1/composition.yaml)"
        )
    return (
        f"the Composition composes {type_ref.get('apiVersion')} {want}, not the XR's "
        f"{xr.get('apiVersion')} {got}"
    )


@functools.lru_cache(maxsize=1024)  # one XR per call: the XRs a replica serves at once
def _usage_labels(composite: str) -> bytes:
    labels = struct_pb2.Struct()
    labels.update({"metadata": {"labels": {USAGE_COMPOSITE_LABEL: composite}}})
    return labels.SerializeToString(deterministic=True)


@functools.lru_cache(maxsize=128)  # two flavours times the Usage reasons of plan.USAGES
def _usage_head(api_version: str, reason: str) -> bytes:
    head = struct_pb2.Struct()
    # replayDeletion re-sends the blocked delete as soon as the Usage goes,
    # instead of waiting for the garbage collector's backoff.
    head.update(
        {
            "apiVersion": api_version,
            "kind": "Usage",
            "spec": {"replayDeletion": True, "reason": reason},
        }
    )
    return head.SerializeToString(deterministic=True)


def carried_over(observed: struct_pb2.Struct) -> struct_pb2.Struct:
    """The parts of an observed resource to carry over unchanged into desired."""
    out = struct_pb2.Struct()
    for key in ("apiVersion", "kind"):
        if key in observed.fields:
            out.fields[key].CopyFrom(observed.fields[key])
    ext = structs.str_at(observed, "metadata", "annotations", EXTERNAL_NAME)
    if ext:
        out.fields["metadata"].struct_value.fields["annotations"].struct_value.fields[
            EXTERNAL_NAME
        ].string_value = ext
    # A Usage's label: Crossplane applies desired state with server-side apply, so a label
    # left out here would be removed, and the Usage no longer found (cluster.REQ_USAGES).
    composite = structs.str_at(observed, "metadata", "labels", USAGE_COMPOSITE_LABEL)
    if composite:
        out.fields["metadata"].struct_value.fields["labels"].struct_value.fields[
            USAGE_COMPOSITE_LABEL
        ].string_value = composite
    if "spec" in observed.fields:
        out.fields["spec"].CopyFrom(observed.fields["spec"])
    return out
