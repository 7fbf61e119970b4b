"""What a rollout means for one ClusterPlugin in one call, and what it reports back.

``function/following/pull.py`` makes it; the ``CallContext`` carries it (``ctx.rollout``):
``function/addons/kit/helm.py`` takes an admitted cluster's chart versions and values from it in
place of the Composition's, and the planner writes its ``report`` into ``status.rollout``,
which the rollout reads back. Nothing here reads a request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from function.rollout.spec import TargetPlugin


class PluginReport(Protocol):
    """What the report reads of a ``status.plugins[]`` entry (``plan.PluginStatus``)."""

    @property
    def name(self) -> str:
        """The add-on."""

    @property
    def version(self) -> str:
        """The chart version helm runs."""

    @property
    def target_version(self) -> str:
        """The chart version it moves to."""

    @property
    def upgrade(self) -> str:
        """Its day-two phase."""

    @property
    def upgrade_since(self) -> str:
        """Since when (RFC 3339)."""

    @property
    def message(self) -> str:
        """What its status says."""


# status.rollout.phase of a ClusterPlugin.
NOT_ADMITTED = "NotAdmitted"
SKIPPED = "Skipped"
UPGRADING = "Upgrading"
HEALTHY = "Healthy"
FAILED = "Failed"
ROLLED_BACK = "RolledBack"
# Kept where it is: its rollout is refused or no longer selects it (``reason`` says which).
HELD = "Held"
# Phases of a cluster that applies the target (Halted keeps them where they are).
APPLYING = frozenset({UPGRADING, HEALTHY, FAILED})
# A day-two phase that says the target did not run healthy on this cluster.
_DAY_TWO_FAILED = frozenset({"Failed", "RolledBack", "RollingBack"})


@dataclass(frozen=True)
class RolloutTarget:
    """A rollout that selects this ClusterPlugin: what applies, and where the cluster stands."""

    name: str
    revision: str
    wave: str = ""  # the open wave it is admitted in ("": not admitted)
    # What applies in this call, release node -> chart version, and values (the add-on's main
    # Release only): the target once admitted; otherwise the last target the rollout
    # completed (``status.settled``), if any, so that a new target never moves a cluster back.
    versions: Mapping[str, str] = field(default_factory=dict)
    values: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    # status.plugins[] name -> the chart version the target names (the add-ons it moves).
    plugins: Mapping[str, str] = field(default_factory=dict)
    skipped: str = ""  # why the cluster is skipped ("" if not)
    rolled_back: bool = False  # the rollout rolled back: the cluster returns
    why_not: str = ""  # why not admitted (the rollout halted, its wave not open yet)
    # The rollout still moves (Progressing or Paused): the XR is called back at ttl.waiting.
    under_way: bool = False
    # The current target applies (admitted, or skipped or halted while it already ran it).
    applies: bool = False
    # What a rollout makes this cluster run in this call, add-on by add-on (the target, the
    # last settled one, or what it kept): reported as ``applied`` so that the next call can
    # keep it when no rollout says otherwise (refused, deleted, no longer selecting it).
    applied: tuple[TargetPlugin, ...] = ()
    held: str = ""  # why it keeps ``applied`` with no rollout moving it ("" if not held)
    # Other rollouts that select this cluster too (the first by name is followed).
    conflicts: tuple[str, ...] = ()
    note: str = ""  # said beside an admitted cluster's phase (e.g. unreachable)

    def report(self, plugins: Iterable[PluginReport]) -> dict[str, Any]:
        """``status.rollout``: which rollout and revision, the wave, the phase, healthy since."""
        out: dict[str, Any] = {"name": self.name}
        if self.revision:
            out["revision"] = self.revision
        if self.wave:
            out["wave"] = self.wave
        if self.applied:
            out["applied"] = [
                p.model_dump(by_alias=True, mode="json", exclude_defaults=True)
                for p in self.applied
            ]
        if self.conflicts:
            out["conflicts"] = list(self.conflicts)
        if self.held:
            applying = {"applying": True} if self.applies else {}
            return {**out, "phase": HELD, "reason": self.held, **applying}
        if self.skipped:
            applying = {"applying": True} if self.applies else {}
            return {**out, "phase": SKIPPED, "reason": self.skipped, **applying}
        if self.rolled_back:
            return {**out, "phase": ROLLED_BACK}
        if not self.applies:
            why = {"reason": self.why_not} if self.why_not else {}
            return {**out, "phase": NOT_ADMITTED, **why}
        return {**out, **self._applying(plugins)}

    def _applying(self, plugins: Iterable[PluginReport]) -> dict[str, Any]:
        """The phase (and reason or healthy since) of a cluster that applies the target."""
        moving = [p for p in plugins if p.name in self.plugins]
        failed = next((p for p in moving if p.upgrade in _DAY_TWO_FAILED), None)
        if failed is not None:
            return {"phase": FAILED, "reason": f"{failed.name}: {failed.message}"}
        note = {"reason": self.note} if self.note else {}
        healthy = [
            p
            for p in moving
            if p.version == self.plugins[p.name] and p.upgrade == "Healthy" and not p.target_version
        ]
        if moving and len(healthy) == len(moving):
            since = max(p.upgrade_since for p in healthy)
            return {**note, "phase": HEALTHY, "healthySince": since}
        return {**note, "phase": UPGRADING}
