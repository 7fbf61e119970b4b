"""API flavours: the one place that knows legacy (cluster-scoped) and namespaced kinds.

A namespaced (Crossplane v2) XR may only compose namespaced kinds: the
``*.aws.m.upbound.io`` and ``helm.m.crossplane.io`` groups, whose
``providerConfigRef`` names a kind and which have no ``deletionPolicy``, and
``protection.crossplane.io`` Usages. A legacy XR (Crossplane 1.x, or v2
``LegacyCluster``) composes the cluster-scoped kinds and
``apiextensions.crossplane.io/v1beta1`` Usages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    "Release": ("helm.crossplane.io/v1beta1", "helm.m.crossplane.io/v1beta1"),
    "ProviderConfig": ("helm.crossplane.io/v1beta1", "helm.m.crossplane.io/v1beta1"),
    "Usage": ("apiextensions.crossplane.io/v1beta1", "protection.crossplane.io/v1beta1"),
}

EXTERNAL_NAME = "crossplane.io/external-name"


@dataclass(frozen=True)
class Flavour:
    """How composed resources are shaped for one XR."""

    namespaced: bool
    aws_provider_config: str
    aws_provider_config_kind: str
    helm_provider_config: str

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
        return self._resource("Release", spec, external_name=release_name)

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

    def usage(
        self, of: tuple[str, str, str], by: tuple[str, str, str], reason: str
    ) -> dict[str, Any]:
        """A Usage that blocks deletion of ``of`` while ``by`` exists.

        ``of`` and ``by`` are (apiVersion, kind, metadata.name) of composed resources.
        """

        def ref(t: tuple[str, str, str]) -> dict[str, Any]:
            return {"apiVersion": t[0], "kind": t[1], "resourceRef": {"name": t[2]}}

        return {
            "apiVersion": self.api_version("Usage"),
            "kind": "Usage",
            # replayDeletion re-sends the blocked delete as soon as the Usage goes,
            # instead of waiting for the garbage collector's backoff.
            "spec": {"of": ref(of), "by": ref(by), "replayDeletion": True, "reason": reason},
        }

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
