"""``simulate``: play a ClusterPlugin's whole lifecycle against the in-memory Crossplane.

The workload control plane starts neither initialized nor available, becomes
initialized at ``initialized_at`` and available at ``available_at``; every
composed resource turns Ready ``ready_delay`` reconciles after it is created,
unless a fault holds it down. Each reconcile is one full Crossplane reconcile
(required-resources loop, apply, delete what is no longer desired).

What is recorded, per reconcile: what was created or deleted, which composed
resources the function reported ready, the XR's Ready condition, and what every
plugin waited for (``status.plugins[].waitingFor`` of the desired composite).
From that, per composed resource: the reconcile it appeared at, what it waited
for before appearing (the plugin entries whose message names it as the node
held back), and when it first became ready.

Faults (``NODE@STEP[+DURATION]``): the provider reports NODE not Ready during
reconciles STEP .. STEP+DURATION-1 (it is observed not Ready then, and Ready
again from STEP+DURATION). The pseudo-node ``control-plane`` makes the workload
control plane unavailable for those reconciles instead.

Deleting the cluster (``delete_cluster_at``): at that reconcile the CAPI Cluster
carries a deletionTimestamp, from the next one its control plane and
infrastructure object too, and ``cluster_gone_after`` reconciles after it the
cluster is gone. The run then passes if nothing was deleted while the cluster
existed, every Release took the orphan policy within two reconciles of the
function seeing the deletion, nothing was uninstalled (or left hanging in an
uninstall), and everything composed was deleted once the cluster was gone, over
a few reconciles in Usage order: nothing while a Usage of it was still there
(Crossplane's usage webhook would refuse it).

Stopping early: once the XR is Ready, every scheduled event (control-plane
transitions, faults) is over and ``SETTLE_STEPS`` reconciles in a row changed
nothing, the run stops: the remaining reconciles would print identical lines.
``all_steps`` turns this off.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.addons.kit import cni
from function.plan import CHARTS_HEALTHY, CLUSTER_DELETING
from function_tools.in_memory_crossplane import InMemoryCrossplane, orphaned

CONTROL_PLANE = "control-plane"
_CONDITION_STATUS = {fnv1.STATUS_CONDITION_TRUE: "True", fnv1.STATUS_CONDITION_FALSE: "False"}
SETTLE_STEPS = 3
_FAULT = re.compile(
    r"^(?P<node>[a-z0-9]([-a-z0-9]*[a-z0-9])?)@(?P<step>\d+)(\+(?P<duration>\d+))?$"
)


class SimulateError(ValueError):
    """A bad simulate argument."""


@dataclass(frozen=True)
class Fault:
    """NODE held not-ready during reconciles ``start`` .. ``start + duration - 1``."""

    node: str
    start: int
    duration: int = 1

    def active(self, step: int) -> bool:
        """Whether the fault holds during reconcile ``step``."""
        return self.start <= step < self.start + self.duration

    @property
    def end(self) -> int:
        """The first reconcile after the fault."""
        return self.start + self.duration

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"node": self.node, "step": self.start, "duration": self.duration}


def parse_slow(text: str) -> tuple[str, int]:
    """``KIND=N`` (``--slow``): resources of KIND turn Ready N reconciles after creation."""
    kind, sep, count = text.partition("=")
    if not sep or not kind or not count.isdigit() or int(count) < 1:
        msg = f"{text!r} is not KIND=N with N at least 1 (e.g. Distribution=15)"
        raise SimulateError(msg)
    return kind, int(count)


def parse_fault(text: str) -> Fault:
    """Parse ``NODE@STEP[+DURATION]`` (duration defaults to 1)."""
    m = _FAULT.match(text.strip())
    if not m:
        msg = f"{text!r} is not NODE@STEP[+DURATION], e.g. {cni.RELEASE}@12+3"
        raise SimulateError(msg)
    start, duration = int(m.group("step")), int(m.group("duration") or 1)
    if start < 1 or duration < 1:
        msg = f"{text!r}: STEP and DURATION must be at least 1"
        raise SimulateError(msg)
    return Fault(m.group("node"), start, duration)


@dataclass(frozen=True)
class SpecChange:
    """``STEP:PATH=VALUE`` (``--set``): before reconcile STEP the XR's PATH becomes VALUE."""

    step: int
    path: tuple[str, ...]
    value: Any  # parsed as YAML; None removes the field

    def apply(self, xr: dict[str, Any]) -> None:
        """Change ``xr`` in place."""
        node = xr
        for key in self.path[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        if self.value is None:
            node.pop(self.path[-1], None)
        else:
            node[self.path[-1]] = self.value

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"step": self.step, "path": ".".join(self.path), "value": self.value}


_CHANGE = re.compile(r"^(?P<step>\d+):(?P<path>[A-Za-z][\w-]*(\.[A-Za-z][\w-]*)*)=(?P<value>.*)$")
_MISSING_CHART = re.compile(r"^[a-z0-9][-a-z0-9.]*@v?\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$")


def parse_change(text: str) -> SpecChange:
    """``STEP:PATH=VALUE``, e.g. ``16:spec.networking.amazonVPC.version=1.21.1``."""
    import yaml  # noqa: PLC0415  # the CLI's; only parsing arguments needs it

    m = _CHANGE.match(text.strip())
    if not m or int(m.group("step")) < 1 or m.group("path").split(".")[0] not in {
        "spec",
        "metadata",
    }:
        msg = (
            f"{text!r} is not STEP:PATH=VALUE with STEP at least 1 and PATH under spec or "
            "metadata, e.g. 16:spec.networking.amazonVPC.version=1.21.1 (VALUE null removes it)"
        )
        raise SimulateError(msg)
    try:
        value = yaml.safe_load(m.group("value"))
    except yaml.YAMLError as err:
        msg = f"{text!r}: VALUE is not YAML ({err})"
        raise SimulateError(msg) from None
    return SpecChange(int(m.group("step")), tuple(m.group("path").split(".")), value)


@dataclass(frozen=True)
class KubernetesUpgrade:
    """``STEP=VERSION[+ROLL]``: a control-plane upgrade.

    The control plane is asked for VERSION before reconcile STEP, and runs it ROLL reconciles
    later (CAPI rolls its machines meanwhile).
    """

    step: int
    version: str
    roll: int = 3

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"step": self.step, "version": self.version, "roll": self.roll}


_KUBERNETES = re.compile(r"^(?P<step>\d+)=(?P<version>v\d+\.\d+\.\d+)(\+(?P<roll>\d+))?$")


def parse_kubernetes(text: str) -> KubernetesUpgrade:
    """``STEP=VERSION[+ROLL]``, e.g. ``20=v1.34.1+3``."""
    m = _KUBERNETES.match(text.strip())
    if not m or int(m.group("step")) < 1:
        msg = f"{text!r} is not STEP=VERSION[+ROLL], e.g. 20=v1.34.1+3"
        raise SimulateError(msg)
    return KubernetesUpgrade(int(m.group("step")), m.group("version"), int(m.group("roll") or 3))


def parse_missing_chart(text: str) -> str:
    """``CHART@VERSION`` (``--missing-chart``): the chart repository does not have it."""
    if not _MISSING_CHART.match(text.strip()):
        msg = f"{text!r} is not CHART@VERSION, e.g. aws-vpc-cni@1.99.0"
        raise SimulateError(msg)
    return text.strip()


@dataclass(frozen=True)
class Settings:
    """The schedule of one simulation."""

    steps: int = 60
    initialized_at: int = 3
    available_at: int = 8
    ready_delay: int = 1
    # Kinds slower to turn Ready than ready_delay: (kind, reconciles after creation).
    slow: tuple[tuple[str, int], ...] = ()
    faults: tuple[Fault, ...] = ()
    crossplane_v1: bool = False
    all_steps: bool = False
    delete_cluster_at: int | None = None
    cluster_gone_after: int = 4
    # Day two: changes of the XR at a reconcile (--set), chart versions the repository
    # lacks (--missing-chart), and the seconds between two reconciles (the soak's clock).
    changes: tuple[SpecChange, ...] = ()
    # A control-plane upgrade (--kubernetes-at): asked for at a reconcile, run some later.
    kubernetes: KubernetesUpgrade | None = None
    missing_charts: tuple[str, ...] = ()
    seconds_per_reconcile: int = 10

    @property
    def cluster_gone_at(self) -> int | None:
        """The reconcile from which the cluster is no longer found."""
        if self.delete_cluster_at is None:
            return None
        return self.delete_cluster_at + self.cluster_gone_after

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "steps": self.steps,
            "initializedAt": self.initialized_at,
            "availableAt": self.available_at,
            "readyDelay": self.ready_delay,
            "slow": dict(self.slow),
            "faults": [f.as_dict() for f in self.faults],
            "crossplaneV1": self.crossplane_v1,
            "deleteClusterAt": self.delete_cluster_at,
            "clusterGoneAt": self.cluster_gone_at,
            "changes": [c.as_dict() for c in self.changes],
            "kubernetes": self.kubernetes.as_dict() if self.kubernetes else None,
            "missingCharts": list(self.missing_charts),
            "secondsPerReconcile": self.seconds_per_reconcile,
        }


@dataclass
class StepRecord:
    """What one reconcile did and saw."""

    step: int
    initialized: bool
    available: bool
    cluster: str = "present"  # present | deleting | gone
    faults: list[str] = field(
        default_factory=list
    )  # held not-ready (or unavailable) in this reconcile
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    became_ready: list[str] = field(default_factory=list)
    became_unready: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # desired specs unlike the last reconcile's
    ready_count: int = 0
    desired_count: int = 0
    xr_ready: bool = False
    waiting: dict[str, str] = field(default_factory=dict)  # plugin -> waitingFor
    # The XR's conditions the function set that are not True: "<type>=<status> (<reason>): ..."
    not_true: list[str] = field(default_factory=list)
    results: list[dict[str, str]] = field(default_factory=list)
    fatal: str | None = None
    # Day two: the XR's status.upgrade, and per plugin with a Release its day-two fields
    # (upgrade, version, targetVersion, lastHealthyVersion) as status.plugins[] says them.
    upgrade: str = ""
    charts: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def in_flight(self) -> bool:
        """Whether a chart upgrade or rollback is under way (its soak included)."""
        return self.upgrade in {"Upgrading", "RollingBack"}

    @property
    def cluster_deleting(self) -> bool:
        """Whether the function said its cluster's deletion is not over (ClusterDeleting)."""
        return any(c.startswith(f"PluginsReady=False ({CLUSTER_DELETING})") for c in self.not_true)

    @property
    def quiet(self) -> bool:
        """Nothing changed in this reconcile."""
        return not (
            self.created
            or self.deleted
            or self.became_ready
            or self.became_unready
            or self.changed
            or self.results
            or self.in_flight
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        d: dict[str, Any] = {
            "step": self.step,
            "controlPlane": {"initialized": self.initialized, "available": self.available},
            "cluster": self.cluster,
            "faults": self.faults,
            "created": self.created,
            "deleted": self.deleted,
            "becameReady": self.became_ready,
            "becameNotReady": self.became_unready,
            "changed": self.changed,
            "ready": self.ready_count,
            "desired": self.desired_count,
            "xrReady": self.xr_ready,
            "waiting": self.waiting,
            "notTrue": self.not_true,
            "results": self.results,
            "upgrade": self.upgrade,
            "charts": self.charts,
        }
        if self.fatal is not None:
            d["fatal"] = self.fatal
        return d


@dataclass
class NodeTimeline:
    """One composed resource over the run."""

    name: str
    appeared: int
    ready: int | None = None
    waited_for: list[str] = field(default_factory=list)
    kind: str = ""
    # reconciles where it went Ready -> not Ready, and where its desired body changed
    not_ready_again: list[int] = field(default_factory=list)
    changed: list[int] = field(default_factory=list)
    # The reconcile Crossplane deleted it at, and (Releases) whether it was
    # forgotten (orphan policy), uninstalled, or left hanging in an uninstall.
    deleted: int | None = None
    deletion: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "name": self.name,
            "appeared": self.appeared,
            "ready": self.ready,
            "waitedFor": self.waited_for,
            "notReadyAgain": self.not_ready_again,
            "changed": self.changed,
            "deleted": self.deleted,
            "deletion": self.deletion,
        }


@dataclass
class Simulation:
    """The outcome of a run."""

    settings: Settings
    xr: dict[str, Any]
    steps: list[StepRecord] = field(default_factory=list)
    nodes: dict[str, NodeTimeline] = field(default_factory=dict)
    xr_ready_at: int | None = None
    deletions: list[tuple[int, str]] = field(default_factory=list)
    stopped_early: bool = False
    unknown_faults: list[str] = field(default_factory=list)
    # The cluster's deletion: when the function recorded it, when every Release had
    # the orphan policy, uninstalls (and hung ones), and what is left at the end.
    deletion_recorded_at: int | None = None
    orphaned_at: int | None = None
    uninstalls: list[tuple[int, str]] = field(default_factory=list)
    hung: list[tuple[int, str]] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    # Deleted while a Usage of it or its user was still there (InMemoryCrossplane.deleted_in_use).
    deleted_in_use: list[tuple[int, str]] = field(default_factory=list)

    @property
    def last_step(self) -> int:
        """The last reconcile played."""
        return self.steps[-1].step if self.steps else 0

    @property
    def xr_ready_at_end(self) -> bool:
        """The XR's Ready condition after the last reconcile."""
        return bool(self.steps) and self.steps[-1].xr_ready

    @property
    def fatal(self) -> str | None:
        """The first FATAL message, if any."""
        return next((s.fatal for s in self.steps if s.fatal is not None), None)

    @property
    def judged(self) -> StepRecord | None:
        """The reconcile at which the cluster must be usable.

        The last one played, or with ``delete_cluster_at`` the last before the
        cluster's deletion (None when the deletion came at the first).
        """
        before = self.settings.delete_cluster_at
        played = [s for s in self.steps if before is None or s.step < before]
        return played[-1] if played else None

    def conditions_not_true(self) -> list[str]:
        """The XR's conditions that are not True at the judged reconcile, with their reasons."""
        judged = self.judged
        return list(judged.not_true) if judged is not None else []

    def problems(self) -> list[str]:
        """Why the run failed (empty when it passed)."""
        out = []
        if self.fatal is not None:
            out.append(f"the function returned a FATAL result: {self.fatal}")
        if self.settings.delete_cluster_at is not None:
            return out + self._usable_problems() + self._deletion_problems()
        if self.xr_ready_at is None:
            out.append(f"the XR never became Ready within {self.settings.steps} reconciles")
        elif not self.xr_ready_at_end:
            out.append(
                f"the XR became Ready at reconcile {self.xr_ready_at} "
                "but is not Ready at the last one"
            )
        out += self._condition_problems()
        if self.deletions:
            listed = ", ".join(f"{name} (reconcile {step})" for step, name in self.deletions)
            out.append(f"{len(self.deletions)} composed resource(s) deleted: {listed}")
        return out

    def _condition_problems(self) -> list[str]:
        """A usable cluster has every condition the function sets True.

        PluginsReady is left out: it is the XR's Ready itself, which the other
        problems already name, and its waits are listed under the run.
        """
        judged = self.judged
        if judged is None or judged.fatal is not None:
            return []
        # ChartsHealthy is day two's, judged by _day_two_problems.
        bad = [
            c.partition(":")[0]
            for c in judged.not_true
            if not c.startswith(("PluginsReady=", f"{CHARTS_HEALTHY}="))
        ]
        out = self._day_two_problems(judged)
        if not bad:
            return out
        usable = f"the cluster is not usable at reconcile {judged.step}"
        return [f"{usable}: {len(bad)} XR condition(s) not True: {', '.join(bad)}", *out]

    def _day_two_problems(self, judged: StepRecord) -> list[str]:
        """A chart upgrade is over by the judged reconcile, and fails only where asked to."""
        if judged.in_flight:
            under_way = (
                f"a chart upgrade was still under way at reconcile {judged.step} "
                f"({judged.upgrade}): play more reconciles, or change the spec earlier"
            )
            return [under_way]
        failed = sorted(
            f"{plugin} ({f['upgrade']})"
            for plugin, f in judged.charts.items()
            if f.get("upgrade") in {"Failed", "RolledBack"}
        )
        if failed and not self.settings.missing_charts:
            return [f"chart upgrades failed though no chart was missing: {', '.join(failed)}"]
        return []

    def _usable_problems(self) -> list[str]:
        """With the cluster's deletion played: the XR was Ready, all True, just before it."""
        at = self.settings.delete_cluster_at
        judged = self.judged
        if judged is None or judged.fatal is not None:
            return []
        out = []
        if self.xr_ready_at is None or self.xr_ready_at >= (at or 0):
            out.append(
                f"the XR never became Ready before the cluster's deletion at reconcile {at} "
                "(delete it later: --delete-cluster-at)"
            )
        elif not judged.xr_ready:
            out.append(
                f"the XR became Ready at reconcile {self.xr_ready_at} but is not Ready at "
                f"reconcile {judged.step}, the last before the cluster's deletion"
            )
        return out + self._condition_problems()

    def waits_at_end(self) -> list[str]:
        """What the XR waits for after the last reconcile, when not Ready then.

        Each plugin's waitingFor, then the conditions that are not True (but the
        PluginsReady summary of those same waits).
        """
        last = self.steps[-1] if self.steps else None
        if last is None or last.fatal is not None or last.xr_ready:
            return []
        said = [f"{plugin}: {what}" for plugin, what in last.waiting.items()]
        said += [c for c in last.not_true if not c.startswith("PluginsReady=False (Waiting)")]
        return said

    def _deletion_problems(self) -> list[str]:
        s = self.settings
        gone_at = s.cluster_gone_at or 0
        out = []
        early = [(step, name) for step, name in self.deletions if step < gone_at]
        if early:
            listed = ", ".join(f"{name} (reconcile {step})" for step, name in early)
            out.append(f"deleted while the cluster existed: {listed}")
        if self.deleted_in_use:
            listed = ", ".join(f"{name} (reconcile {step})" for step, name in self.deleted_in_use)
            out.append(
                "deleted while a Usage of it, or the user a Usage of it named, was still "
                "there (Crossplane's usage webhook refuses the one, the other breaks the "
                f"order): {listed}"
            )
        if self.uninstalls:
            out.append(f"{len(self.uninstalls)} Release(s) uninstalled instead of forgotten")
        if self.hung:
            out.append(f"{len(self.hung)} Release(s) hang uninstalling from a cluster that is gone")
        if self.deletion_recorded_at is None:
            out.append("the function never saw the cluster being deleted")
        elif self.orphaned_at is None or self.orphaned_at > self.deletion_recorded_at + 2:
            out.append(
                "the Releases did not all take the orphan policy within two reconciles of "
                f"the deletion being seen (reconcile {self.deletion_recorded_at})"
            )
        end = self._withdrawal_end_problem(gone_at)
        return out + ([end] if end is not None else [])

    def _withdrawal_end_problem(self, gone_at: int) -> str | None:
        """What is wrong with how the run ended, if anything, once the cluster was to go."""
        if self.last_step < gone_at:
            return f"the run ended before the cluster was gone (reconcile {gone_at})"
        # The withdrawal holds a layer while what it deleted lingers, so quiet reconciles do
        # not mean it is over: the function says whether it is (ClusterDeleting).
        withdrawing = bool(self.steps) and self.steps[-1].cluster_deleting
        if self.left and withdrawing:
            return (
                f"the run ended while {len(self.left)} composed resource(s) were still being "
                "deleted in Usage order: play more reconciles (--steps)"
            )
        if self.left:
            return f"{len(self.left)} composed resource(s) left after the cluster was gone"
        if withdrawing:
            return (
                "the run ended while what was deleted last was still being deleted by its "
                "providers: play more reconciles (--steps)"
            )
        return None

    @property
    def ok(self) -> bool:
        """Whether the lifecycle passed: ready, no deletions, no FATAL."""
        return not self.problems()

    def ordered_nodes(self) -> list[NodeTimeline]:
        """Nodes by appearance, then readiness, then name."""
        big = self.last_step + 1
        return sorted(self.nodes.values(), key=lambda n: (n.appeared, n.ready or big, n.name))

    def as_dict(self) -> dict[str, Any]:
        """The machine-readable document ``--output json`` prints."""
        meta = self.xr.get("metadata") or {}
        return {
            "xr": {
                "apiVersion": self.xr.get("apiVersion"),
                "kind": self.xr.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
            },
            "settings": self.settings.as_dict(),
            "steps": [s.as_dict() for s in self.steps],
            "nodes": [n.as_dict() for n in self.ordered_nodes()],
            "xrReadyAt": self.xr_ready_at,
            "xrReadyAtEnd": self.xr_ready_at_end,
            "deletions": [{"step": step, "name": name} for step, name in self.deletions],
            "lastStep": self.last_step,
            "stoppedEarly": self.stopped_early,
            "unknownFaults": self.unknown_faults,
            "deletionRecordedAt": self.deletion_recorded_at,
            "orphanedAt": self.orphaned_at,
            "uninstalls": [{"step": step, "name": name} for step, name in self.uninstalls],
            "hung": [{"step": step, "name": name} for step, name in self.hung],
            "left": self.left,
            "deletedInUse": [{"step": step, "name": name} for step, name in self.deleted_in_use],
            "ok": self.ok,
            "problems": self.problems(),
            "waitingAtEnd": self.waits_at_end(),
            "judgedAt": self.judged.step if self.judged is not None else None,
            "conditionsNotTrue": self.conditions_not_true(),
        }


# status.plugins[] fields of day two (function/upgrade.py), in the order the summary says them.
DAY_TWO_FIELDS = ("upgrade", "version", "targetVersion", "lastHealthyVersion")


def _plugins(rsp: fnv1.RunFunctionResponse) -> list[dict[str, Any]]:
    status = resource.struct_to_dict(rsp.desired.composite.resource).get("status") or {}
    return [p for p in status.get("plugins") or [] if isinstance(p, dict)]


class Simulator:
    """Drives a InMemoryCrossplane through a schedule and records the timeline."""

    def __init__(
        self,
        xr: dict[str, Any],
        required: Iterable[dict[str, Any]] = (),
        *,
        step_input: dict[str, Any] | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.settings = settings or Settings()
        s = self.settings
        self.world = InMemoryCrossplane(
            xr,
            required,
            step_input=step_input,
            crossplane_v1=s.crossplane_v1,
            capabilities=not s.crossplane_v1,
            ready_delay=s.ready_delay,
            slow=dict(s.slow),
            missing_charts=s.missing_charts,
            seconds_per_reconcile=s.seconds_per_reconcile,
        )
        self.sim = Simulation(s, xr)
        self._ready: set[str] = set()
        self._bodies: dict[str, bytes] = {}
        self._waits: dict[str, list[str]] = {}  # node -> what it waited for, before it appeared
        self._quiet_run = 0

    def _schedule(self, step: int) -> tuple[bool, bool]:
        s = self.settings
        for change in s.changes:
            if change.step == step:
                change.apply(self.world.xr)
        upgrade = s.kubernetes
        if upgrade is not None and step in {upgrade.step, upgrade.step + upgrade.roll}:
            self.world.set_kubernetes_version(
                upgrade.version, running=step == upgrade.step + upgrade.roll
            )
        available = step >= s.available_at and not any(
            f.node == CONTROL_PLANE and f.active(step) for f in s.faults
        )
        initialized = step >= s.initialized_at or step >= s.available_at
        self.world.set_control_plane(initialized=initialized, available=available)
        # InMemoryCrossplane applies held_down at the providers' tick after the reconcile, so a
        # node is observed not-ready at reconcile N when held at the tick of N-1.
        self.world.held_down = {
            f.node for f in s.faults if f.node != CONTROL_PLANE and f.active(step + 1)
        }
        if s.delete_cluster_at is not None and s.cluster_gone_at is not None:
            if step == s.cluster_gone_at:
                self.world.remove_cluster()
            elif step >= s.delete_cluster_at:
                # CAPI marks the Cluster first, its control plane and infrastructure after.
                self.world.delete_cluster(cascade=step > s.delete_cluster_at)
        return initialized, available

    def _cluster_state(self) -> str:
        if self.world.cluster_gone:
            return "gone"
        return "deleting" if self.world.cluster_deleting else "present"

    def _record_waits(self, rsp: fnv1.RunFunctionResponse) -> dict[str, str]:
        waiting = {}
        for p in _plugins(rsp):
            name, wait, msg = (
                str(p.get("name", "")),
                str(p.get("waitingFor", "")),
                str(p.get("message", "")),
            )
            if not wait:
                continue
            waiting[name] = wait
            node, sep, _ = msg.partition(": ")
            if sep and " " not in node and node not in self.sim.nodes:
                seen = self._waits.setdefault(node, [])
                if wait not in seen:
                    seen.append(wait)
        return waiting

    def _record_charts(self, rsp: fnv1.RunFunctionResponse, out: StepRecord) -> None:
        status = resource.struct_to_dict(rsp.desired.composite.resource).get("status") or {}
        out.upgrade = str(status.get("upgrade") or "")
        for p in _plugins(rsp):
            fields = {k: str(p[k]) for k in DAY_TWO_FIELDS if p.get(k)}
            if fields:
                out.charts[str(p.get("name", ""))] = fields

    def _record_changes(self, n: int, rsp: fnv1.RunFunctionResponse, out: StepRecord) -> None:
        for name in sorted(rsp.desired.resources):
            # The spec: what the provider acts on (the day-two record in a Release's
            # annotations changes with each phase, its spec only with a move).
            obj = rsp.desired.resources[name].resource
            spec = obj.fields["spec"] if "spec" in obj.fields else None
            body = spec.SerializeToString(deterministic=True) if spec is not None else b""
            before = self._bodies.get(name)
            if before is not None and before != body:
                out.changed.append(name)
                node = self.sim.nodes.get(name)
                if node is not None:
                    node.changed.append(n)
            self._bodies[name] = body

    def step(self) -> StepRecord:
        """Play one reconcile."""
        n = self.world.step + 1
        initialized, available = self._schedule(n)
        rec = self.world.reconcile()
        # The faults in effect in this reconcile (what it observes), not the providers' next tick.
        out = StepRecord(
            n,
            initialized,
            available,
            cluster=self._cluster_state(),
            faults=sorted({f.node for f in self.settings.faults if f.active(n)}),
        )
        rsp = rec.response
        if rec.fatal is not None or rsp is None:
            out.fatal = rec.fatal or "no response"
            self.sim.steps.append(out)
            return out
        out.created, out.deleted = list(rec.created), list(rec.deleted)
        out.waiting = self._record_waits(rsp)
        self._record_charts(rsp, out)
        out.not_true = [
            f"{c.type}={_CONDITION_STATUS.get(c.status, 'Unknown')} ({c.reason}): {c.message}"
            for c in rsp.conditions
            if c.status != fnv1.STATUS_CONDITION_TRUE
        ]
        out.results = [
            {"severity": fnv1.Severity.Name(r.severity), "reason": r.reason, "message": r.message}
            for r in rsp.results
        ]
        ready_now = {
            name for name, r in rsp.desired.resources.items() if r.ready == fnv1.READY_TRUE
        }
        out.desired_count, out.ready_count = len(rsp.desired.resources), len(ready_now)
        for name in sorted(rec.created):
            if name not in self.sim.nodes:
                kind = self.world.composed[name].obj.get("kind", "")
                self.sim.nodes[name] = NodeTimeline(
                    name, n, waited_for=self._waits.pop(name, []), kind=kind
                )
        for name in sorted(ready_now - self._ready):
            out.became_ready.append(name)
            node = self.sim.nodes.get(name)
            if node is not None and node.ready is None:
                node.ready = n
        for name in sorted(self._ready - ready_now):
            if name in rsp.desired.resources:
                out.became_unready.append(name)
                node = self.sim.nodes.get(name)
                if node is not None:
                    node.not_ready_again.append(n)
        self._ready = ready_now
        self._record_changes(n, rsp, out)
        out.xr_ready = rec.xr_ready
        if out.xr_ready and self.sim.xr_ready_at is None:
            self.sim.xr_ready_at = n
        self.sim.deletions.extend((n, name) for name in rec.deleted)
        self._record_deletion(n, rsp)
        self.sim.steps.append(out)
        return out

    def _record_deletion(self, n: int, rsp: fnv1.RunFunctionResponse) -> None:
        world, sim = self.world, self.sim
        for name in sorted(set(self.sim.nodes) - set(world.composed)):
            node = sim.nodes[name]
            if node.deleted is None:
                node.deleted = n
                node.deletion = next(
                    ("uninstalled" for _, u in world.uninstalls if u == name),
                    "forgotten" if node.kind == "Release" else "",
                )
        for _, name in world.hung:
            if name in sim.nodes:
                sim.nodes[name].deletion = "hung uninstalling"
        sim.uninstalls, sim.hung = list(world.uninstalls), list(world.hung)
        sim.deleted_in_use = list(world.deleted_in_use)
        sim.left = sorted(world.composed)
        if self.settings.delete_cluster_at is None:
            return
        status = resource.struct_to_dict(rsp.desired.composite.resource).get("status") or {}
        if sim.deletion_recorded_at is None and status.get("clusterDeletion"):
            sim.deletion_recorded_at = n
        releases = [c for c in world.composed.values() if c.obj.get("kind") == "Release"]
        if (
            sim.deletion_recorded_at is not None
            and sim.orphaned_at is None
            and all(orphaned(c.obj) for c in releases)
        ):
            # Applied in this reconcile: observed so from the next one.
            sim.orphaned_at = n + 1

    def _settled(self, rec: StepRecord) -> bool:
        s = self.settings
        # A deletion run settles once the cluster is gone and nothing is left, not even what
        # Crossplane forgot while its provider still deletes it (the function says so).
        done = (
            rec.xr_ready
            if s.delete_cluster_at is None
            else not self.world.composed and not rec.cluster_deleting
        )
        self._quiet_run = self._quiet_run + 1 if rec.quiet and done else 0
        pending = max(
            [
                s.initialized_at,
                s.available_at,
                *(f.end for f in s.faults),
                *(c.step for c in s.changes),
                *((s.kubernetes.step + s.kubernetes.roll,) if s.kubernetes else ()),
                s.cluster_gone_at or 0,
            ]
        )
        return self._quiet_run >= SETTLE_STEPS and rec.step >= pending

    def run(self, on_step: Callable[[StepRecord], None] | None = None) -> Simulation:
        """Play up to ``settings.steps`` reconciles."""
        for _ in range(self.settings.steps):
            rec = self.step()
            if on_step is not None:
                on_step(rec)
            if rec.fatal is not None:
                break  # the same input fails the same way every time
            if not self.settings.all_steps and self._settled(rec):
                self.sim.stopped_early = rec.step < self.settings.steps
                break
        known = set(self.sim.nodes) | {CONTROL_PLANE}
        self.sim.unknown_faults = sorted({f.node for f in self.settings.faults} - known)
        return self.sim


# --- text output -----------------------------------------------------------------


def step_line(rec: StepRecord) -> str:
    """One plain line for a reconcile."""
    cp = "available" if rec.available else "initialized" if rec.initialized else "not initialized"
    parts = [f"reconcile {rec.step:>3}"]
    # A cluster that is gone has no control plane to speak of.
    if rec.cluster != "gone":
        parts.append(f"control plane {cp}")
    if rec.cluster != "present":
        parts.append(f"cluster {rec.cluster}")
    if rec.fatal is not None:
        return " | ".join([*parts, f"FATAL: {rec.fatal}"])
    parts.append(f"ready {rec.ready_count}/{rec.desired_count}")
    parts.append("XR Ready" if rec.xr_ready else "XR not Ready")
    if rec.faults:
        parts.append("fault: " + ", ".join(rec.faults))
    if rec.created:
        parts.append("created: " + ", ".join(sorted(rec.created)))
    if rec.became_unready:
        parts.append("not ready again: " + ", ".join(rec.became_unready))
    if rec.changed:
        parts.append("changed: " + ", ".join(rec.changed))
    if rec.deleted:
        parts.append("DELETED: " + ", ".join(rec.deleted))
    return " | ".join(parts)


def timeline_rows(sim: Simulation) -> list[tuple[str, ...]]:
    """One row per composed resource, in TIMELINE_HEADER's order."""
    return [
        (
            n.name,
            str(n.appeared),
            "; ".join(n.waited_for) or "-",
            str(n.ready) if n.ready is not None else "never",
            ", ".join(map(str, n.not_ready_again)) or "-",
            ", ".join(map(str, n.changed)) or "-",
            (f"{n.deleted} {n.deletion}".strip() if n.deleted is not None else n.deletion) or "-",
        )
        for n in sim.ordered_nodes()
    ]


TIMELINE_HEADER = (
    "composed resource",
    "appeared",
    "waited for before appearing",
    "ready",
    "not ready again",
    "changed",
    "deleted",
)


def summary_lines(sim: Simulation) -> list[str]:
    """The closing lines under the timeline."""
    s = sim.settings
    lines = [
        (
            f"control plane: initialized at reconcile {s.initialized_at}, "
            f"available at {s.available_at}; "
            f"resources ready {s.ready_delay} reconcile(s) after creation"
        ),
    ]
    if s.faults:
        lines.append(
            "faults: "
            + ", ".join(f"{f.node} not ready in reconciles {f.start}-{f.end - 1}" for f in s.faults)
        )
    lines.append(
        "waited for: what status.plugins[] named while the resource was its plugin's first one "
        "held back ('-': never named, e.g. it appeared together with or right after the one named)"
    )
    lines.append(
        f"XR Ready at reconcile: {sim.xr_ready_at if sim.xr_ready_at is not None else 'never'}"
    )
    judged = sim.judged
    if judged is not None and judged.fatal is None:
        when = "the last played" if s.delete_cluster_at is None else "the last before the deletion"
        lines.extend(_not_true_lines(judged, when))
    played = f"reconciles played: {sim.last_step} of {s.steps}"
    if sim.stopped_early:
        settled = "the XR Ready" if s.delete_cluster_at is None else "nothing left"
        played += f" (stopped after {SETTLE_STEPS} quiet reconciles with {settled})"
    lines.append(played)
    if s.delete_cluster_at is not None:
        recorded = sim.deletion_recorded_at
        lines.append(
            f"cluster: deleted at reconcile {s.delete_cluster_at} (control plane and "
            f"infrastructure from {s.delete_cluster_at + 1}), gone from {s.cluster_gone_at}; "
            f"the function recorded the deletion at {recorded if recorded else 'no reconcile'}, "
            f"every Release orphaned from {sim.orphaned_at or 'never'}"
        )
        lines.append(
            f"Releases uninstalled: {len(sim.uninstalls)}, hanging in an uninstall: "
            f"{len(sim.hung)}; composed resources left: {len(sim.left)}"
        )
        lines.append(f"composed resources deleted: {len(sim.deletions)}")
        if sim.deletions:
            first = min(step for step, _ in sim.deletions)
            last = max(step for step, _ in sim.deletions)
            per_step = Counter(step for step, _ in sim.deletions)
            counts = ", ".join(str(per_step[step]) for step in range(first, last + 1))
            lines.append(f"  over reconciles {first}-{last}: {counts}")
            lines.append(
                "  deleted while a Usage of it or its user was still there: "
                f"{len(sim.deleted_in_use) or 'none'}"
            )
    else:
        lines.append(
            f"composed resources deleted: {len(sim.deletions)} (the cluster's deletion was not "
            "played: --delete-cluster-at N plays it)"
        )
        lines.extend(f"  reconcile {step}: {name}" for step, name in sim.deletions)
    lines.extend(day_two_lines(sim))
    final = sim.steps[-1] if sim.steps else None
    if s.delete_cluster_at is not None and final is not None and final.fatal is None:
        lines.extend(_not_true_lines(final, "the last played"))
    lines.extend(
        f"warning: --fail {name}: no composed resource of that name appeared"
        for name in sim.unknown_faults
    )
    lines.extend(f"FAILED: {p}" for p in sim.problems())
    # The plugins' waits (the conditions are listed above).
    last_waits = final.waiting if final is not None and not final.xr_ready else {}
    if last_waits and sim.settings.delete_cluster_at is None:
        lines.append(f"the plugins wait, after reconcile {sim.last_step}, for:")
        lines.extend(f"  {plugin}: {what}" for plugin, what in last_waits.items())
    return lines


def day_two_lines(sim: Simulation) -> list[str]:
    """Where each plugin's chart stood on day two, at every reconcile it changed."""
    rows: list[str] = []
    last: dict[str, dict[str, str]] = {}
    for rec in sim.steps:
        for plugin, fields in rec.charts.items():
            if last.get(plugin) == fields:
                continue
            last[plugin] = fields
            moving = f" -> {fields['targetVersion']}" if fields.get("targetVersion") else ""
            healthy = fields.get("lastHealthyVersion")
            since = f" (last healthy {healthy})" if healthy else ""
            rows.append(
                f"  reconcile {rec.step:>3}  {plugin}: {fields.get('upgrade') or 'installing'} "
                f"{fields.get('version', '-')}{moving}{since}"
            )
    if not any(" -> " in r or "Failed" in r or "Rolled" in r for r in rows):
        return []  # no upgrade was played: the installs alone say nothing new
    changes = ", ".join(
        f"{c.step}:{'.'.join(c.path)}={'null' if c.value is None else c.value}"
        for c in sim.settings.changes
    )
    head = "day two (status.plugins[]: upgrade phase, chart running -> moving to)"
    if changes:
        head += f"; spec changed at {changes}"
    # IAM moves with the chart: when each policy's spec changed (expand, then contract).
    policies = [
        f"{n.name} at {', '.join(map(str, n.changed))}"
        for n in sim.ordered_nodes()
        if n.kind == "Policy" and n.changed
    ]
    iam = [f"  IAM policies changed: {'; '.join(policies)}"] if policies else []
    return [head, *rows, *iam]


def _not_true_lines(rec: StepRecord, when: str) -> list[str]:
    """The XR's conditions that are not True after reconcile ``rec``, each with its reason."""
    head = f"XR conditions not True at reconcile {rec.step} ({when}):"
    if not rec.not_true:
        return [f"{head} none"]
    return [head, *(f"  {c}" for c in rec.not_true)]


def plain_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """A fixed-width text table."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*r) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def run_live(simulator: Simulator, *, delay: float = 0.0) -> Simulation:
    """Run with a rich progress view (stdout is a terminal), then print the timeline table."""
    import time  # noqa: PLC0415

    from rich.console import Console  # noqa: PLC0415  # only the live view needs rich
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    console = Console(highlight=False)
    progress = Progress(
        TextColumn("reconcile"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
        transient=True,
    )

    def on_step(rec: StepRecord) -> None:
        style = "red" if rec.fatal or rec.deleted else "green" if rec.xr_ready else ""
        progress.console.print(Text(step_line(rec), style=style))
        status = "XR Ready" if rec.xr_ready else f"{len(rec.waiting)} plugin(s) waiting"
        progress.update(
            task, advance=1, status=f"ready {rec.ready_count}/{rec.desired_count}, {status}"
        )
        if delay > 0:
            time.sleep(delay)

    with progress:
        task = progress.add_task("simulate", total=simulator.settings.steps, status="")
        sim = simulator.run(on_step)

    table = Table(title="timeline", title_justify="left", expand=True)
    name, appeared, waited, ready, again, changed, deleted = TIMELINE_HEADER
    table.add_column(name, overflow="fold", ratio=3)
    table.add_column(appeared, justify="right", no_wrap=True, min_width=len(appeared))
    table.add_column(waited, overflow="fold", ratio=3)
    table.add_column(ready, justify="right", no_wrap=True, min_width=len(ready))
    table.add_column(again, overflow="fold", ratio=1)
    table.add_column(changed, overflow="fold", ratio=1)
    table.add_column(deleted, overflow="fold", ratio=1)
    for row in timeline_rows(sim):
        table.add_row(*(Text(c) for c in row))
    console.print(table)
    for line in summary_lines(sim):
        style = "red" if line.startswith(("FAILED", "warning")) else ""
        console.print(Text(line, style=style))
    if sim.ok:
        console.print(Text(_ok_line(sim), style="green"))
    return sim


def run_plain(simulator: Simulator, echo: Callable[[str], None]) -> Simulation:
    """Run printing one plain line per reconcile, then the timeline table."""
    sim = simulator.run(lambda rec: echo(step_line(rec)))
    echo("")
    echo("timeline")
    echo(plain_table(TIMELINE_HEADER, timeline_rows(sim)))
    echo("")
    for line in summary_lines(sim):
        echo(line)
    if sim.ok:
        echo(_ok_line(sim))
    return sim


def _ok_line(sim: Simulation) -> str:
    usable = f"OK: the XR became Ready at reconcile {sim.xr_ready_at} with every condition True"
    if sim.settings.delete_cluster_at is not None:
        return (
            f"{usable}; nothing deleted while the cluster existed, no uninstall, everything "
            "deleted in Usage order once it was gone"
        )
    return f"{usable}, and nothing was deleted"
