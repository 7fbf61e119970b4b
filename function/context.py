"""What every builder and gate may read during one call: ``CallContext``, and the issuer.

Made by ``accept.Accepted.context`` from the accepted spec, the cluster's facts and what is
observed; frozen, so each stage of a call hands the next a new one (``plan.build_plan``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from google.protobuf import struct_pb2

from function import compat
from function.cluster import ClusterFacts
from function.flavour import Flavour
from function.following.target import RolloutTarget
from function.graph import MissingFactError, PortNeed, Readiness, Wait
from function.names import Names, Partition, partition_of
from function.observed import Observed
from function.spec_base import IRSAMode
from function.step_input import StepInput

if TYPE_CHECKING:  # the frame imports the add-ons' models: a type here, no import
    from function.spec import ClusterPluginSpec


def own_struct(_name: str) -> struct_pb2.Struct:
    """A new Struct for composed resource ``_name``: where a body is built if no response is."""
    return struct_pb2.Struct()


@dataclass(frozen=True)
class CallContext:
    """Everything a builder or gate may read during one call (made by ``Accepted.context``).

    Frozen: each stage of a call that decides something (``plan.build_plan``: the cluster's
    deletion, the plugins' readiness rules, day two's chart versions) hands the next stage a
    new context holding it (``dataclasses.replace``), so no builder sees a half-made one.
    """

    spec: ClusterPluginSpec
    step: StepInput
    flavour: Flavour
    names: Names
    facts: ClusterFacts
    observed: Observed
    # SelfHosted IRSA serving at least one add-on's role: the issuer is composed.
    hosts_issuer: bool = False
    # A wanted add-on has an IAM role (unless IRSA is Disabled, composed).
    wants_irsa: bool = False
    # The security-group ports every wanted add-on needs.
    port_needs: tuple[PortNeed, ...] = ()
    readiness: dict[str, Readiness] = field(default_factory=dict)
    # The call's clock, seconds since the epoch: the runner reads it once per call (the
    # in-memory Crossplane gives its own), so the plan is a function of the request and it.
    now: float = 0.0
    # Release node -> the chart versions whose permissions its add-on's IAM grants in this
    # call (function/upgrade.py decides them; absent: the version the release installs).
    chart_versions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Releases given a new spec in this call: what is observed of them is the old one's, so
    # nothing gated on them may go ahead in this call.
    moving: frozenset[str] = frozenset()
    # The rollout that selects the XR (function/following/pull.py): an admitted cluster's chart
    # versions and values come from its target; the planner writes its report.
    rollout: RolloutTarget | None = None
    # Where a Release's body is built (``upgrade.decide``): the runner gives the response's own
    # Struct of that composed resource, so emitting it copies nothing; by default a new one.
    struct_for: Callable[[str], struct_pb2.Struct] = own_struct

    # --- facts that builders need, raising MissingFactError when unknown ----

    @property
    def region(self) -> str:
        """The AWS region: spec.region, else the AWSCluster's."""
        region = self.spec.region or self.facts.region
        if not region:
            raise MissingFactError(_no_region(self.facts))
        return region

    @property
    def partition(self) -> Partition:
        """The region's partition."""
        return partition_of(self.region)

    @property
    def irsa(self) -> IRSAMode:
        """The IRSA mode."""
        return self.spec.irsa.mode

    def issuer_url(self) -> str:
        """The service-account issuer URL (SelfHosted: derived; External: given or CAPA's)."""
        if self.irsa is IRSAMode.EXTERNAL:
            return self.external_issuer()[0]
        return issuer_url(self.spec, self.names, self.region)

    def external_issuer(self) -> tuple[str, str]:
        """External: (issuer URL, OIDC provider ARN), given or read from the EKS control plane."""
        found = external_issuer(self.spec, self.facts)
        if found is None:
            raise MissingFactError(_no_eks_issuer(self.facts))
        return found

    def issuer_host_path(self) -> str:
        """The issuer without its scheme, as IAM condition keys spell it."""
        return self.issuer_url().removeprefix("https://")

    def chart_default(self, chart: str, release: str) -> str:
        """The version of ``chart`` (of ``release``) when neither XR nor Composition pins one.

        The compatibility table's default for the minor the control plane runs and, while it
        moves to another, for that one too (function/compat.py); never older than what the
        Release runs (a default does not downgrade). Unknown until the control plane is read.
        """
        facts = self.facts
        minors = compat.cluster_minors(
            facts.kubernetes_version or "", facts.kubernetes_target_version or ""
        )
        if not minors:
            raise MissingFactError(
                Wait(
                    "control plane version",
                    "the control plane's Kubernetes version is not read yet: the chart versions "
                    "follow its minor",
                    reason="control plane version",
                )
            )
        runs = self.observed.chart_version(release) or ""
        version = compat.default_not_older(chart, minors, runs)
        if version is None:
            raise MissingFactError(
                Wait(f"{chart} version", f"no default version of {chart} is known", blocked=True)
            )
        return version

    def arn_of(self, node: str) -> str:
        """The observed ARN of ``node``."""
        arn = self.observed.arn(node)
        if not arn:
            raise MissingFactError(
                Wait(f"{node} ARN", f"{node} reports no status.atProvider.arn yet")
            )
        return arn

    def is_ready(self, node: str) -> bool:
        """Whether ``node`` is observed and ready under its own readiness rule, and stays so.

        A Release given a new spec in this call is not: its readiness is the old spec's.
        """
        if node in self.moving:
            return False
        return self.observed.ready(node, self.readiness.get(node, Readiness.CONDITION))


def issuer_url(
    spec: ClusterPluginSpec, names: Names, region: str, facts: ClusterFacts | None = None
) -> str:
    """The service-account issuer.

    External: the one given, else the EKS control plane's ("" while unknown);
    SelfHosted: the XR's own, in ``region``; PodIdentity: none ("").
    """
    if spec.irsa.mode is IRSAMode.EXTERNAL:
        found = external_issuer(spec, facts)
        return "" if found is None else found[0]
    if spec.irsa.mode is IRSAMode.POD_IDENTITY:
        return ""  # no issuer at all
    return names.issuer_url(region)


OIDC_PROVIDER_ARN_PREFIX = ":oidc-provider/"


def external_issuer(
    spec: ClusterPluginSpec, facts: ClusterFacts | None
) -> tuple[str, str] | None:
    """An External issuer: (URL, OIDC provider ARN); None while unknown.

    As given in ``spec.irsa``, else as CAPA reports it on the EKS control plane
    (``status.oidcProvider.arn``).

    An IAM OIDC provider's ARN ends with its issuer's host and path, so the URL follows.
    """
    irsa = spec.irsa
    if irsa.oidc_provider_arn:
        return irsa.issuer_url.rstrip("/"), irsa.oidc_provider_arn
    arn = None if facts is None else facts.oidc_provider_arn
    if not arn or OIDC_PROVIDER_ARN_PREFIX not in arn:
        return None
    return "https://" + arn.split(OIDC_PROVIDER_ARN_PREFIX, 1)[1].rstrip("/"), arn


def _no_eks_issuer(facts: ClusterFacts) -> Wait:
    if not facts.control_plane_found:
        return Wait(
            "control plane", "the EKS control plane, whose OIDC provider IRSA uses, is not read yet"
        )
    return Wait(
        "AWSManagedControlPlane status.oidcProvider.arn",
        "CAPA has not written the EKS cluster's OIDC provider (spec.associateOIDCProvider) yet",
        reason="EKS OIDC provider",
    )


def _no_region(facts: ClusterFacts) -> Wait:
    if facts.infrastructure_found or facts.control_plane_found:
        return Wait(
            "AWS region",
            "neither spec.region nor the AWSCluster's spec.region is set",
            blocked=True,
        )
    return Wait("AWSCluster", "the cluster's infrastructure object has not been read yet")


# --- gates -------------------------------------------------------------------
