"""The ClusterPluginRollout's spec and status models, and what both sides compute alike.

A rollout moves a fleet of ClusterPlugins to one target in waves (docs/fleet.md, "Rolling out
across a fleet"). Two parties read these: the rollout's own answer (``function/rollout/
answer.py``), which opens waves and publishes them in its status, and each ClusterPlugin
(``function/following/pull.py``), which decides from that status, its own uid and its own
labels whether it is admitted. The models are the source of the rollout's XRD (``make
generate``); the bucket, the label match and the revision are here so that both sides
compute them the same way.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from enum import StrEnum
from typing import Any

from pydantic import Field, field_validator, model_validator

from function.spec_base import CHART_VERSION, HelmValues, StrictModel, check_chart_version

KIND = "ClusterPluginRollout"
PLURAL = "clusterpluginrollouts"
# The ClusterPlugin's requirement for every rollout (all of them: no label selects them).
REQ_ROLLOUTS = "rollouts"
# The rollout's requirement for the ClusterPlugins its selector matches.
REQ_PLUGINS = "cluster-plugins"
CANARY = "canary"

_SHARE = re.compile(r"^(100|[1-9]?[0-9])%$")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


class LabelSelector(StrictModel):
    """Labels that must all match (Crossplane sends no matchExpressions, so neither do we)."""

    match_labels: dict[str, str] = Field(
        alias="matchLabels",
        min_length=1,
        description="Labels a ClusterPlugin must carry, every one, e.g. {env: prod}.",
    )

    @field_validator("match_labels")
    @classmethod
    def _keys(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not _LABEL_KEY.match(key) or len(key) > 317:
                msg = f"{key!r} is not a label key (e.g. env or clusterplugin.dev/ring)"
                raise ValueError(msg)
        return v

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether ``labels`` carry every one of ours."""
        return all(labels.get(k) == v for k, v in self.match_labels.items())


class TargetPlugin(StrictModel):
    """One add-on's chart version and values, as every admitted cluster gets them."""

    name: str = Field(
        min_length=1,
        description=(
            "The add-on, as status.plugins[].name spells it, e.g. aws-load-balancer-controller "
            "or vpc-cni."
        ),
    )
    version: str = Field(
        description="The chart version every admitted cluster moves to, e.g. 3.5.0.",
        json_schema_extra={"pattern": CHART_VERSION.pattern},
    )
    values: HelmValues = Field(
        default_factory=dict,
        description=(
            "Helm values merged under the ClusterPlugin's own spec.<add-on>.values (the "
            "ClusterPlugin's win); keys the function sets are refused as in a ClusterPlugin."
        ),
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )

    _version = field_validator("version")(check_chart_version)


class Target(StrictModel):
    """What every selected cluster moves to: charts, values and (through them) their IAM."""

    plugins: list[TargetPlugin] = Field(
        min_length=1,
        description=(
            "The add-ons that move, each with its chart version and values. An add-on's IAM "
            "policy follows its chart version (expand, upgrade, contract) as on day two."
        ),
    )

    @model_validator(mode="after")
    def _once(self) -> Target:
        names = [p.name for p in self.plugins]
        for i, name in enumerate(names):
            if name in names[:i]:
                msg = f"plugins[{i}].name: {name!r} is named twice"
                raise ValueError(msg)
        return self


class Wave(StrictModel):
    """One wave after the canary: a share of the fleet and/or a selector."""

    max_clusters: str | None = Field(
        default=None,
        alias="maxClusters",
        description=(
            'How many more clusters this wave admits: a count (e.g. "5") or a share of the '
            'selected fleet when the wave opens (e.g. "25%", rounded up). Unset: every '
            "cluster left that its selector matches."
        ),
        json_schema_extra={"pattern": r"^([0-9]+|(100|[1-9]?[0-9])%)$"},
    )
    selector: LabelSelector | None = Field(
        default=None,
        description="Only ClusterPlugins carrying these labels too join this wave.",
    )

    @field_validator("max_clusters")
    @classmethod
    def _share(cls, v: str | None) -> str | None:
        if (
            v is not None
            and not (v.isdigit() and int(v) > 0)
            and not (_SHARE.match(v) and v != "0%")
        ):
            msg = f'{v!r} is neither a count above 0 (e.g. "5") nor a share (e.g. "25%")'
            raise ValueError(msg)
        return v

    def size(self, fleet: int) -> int | None:
        """The clusters it admits out of a fleet of ``fleet``; None: all it matches."""
        if self.max_clusters is None:
            return None
        if self.max_clusters.endswith("%"):
            return max(1, math.ceil(fleet * int(self.max_clusters[:-1]) / 100))
        return int(self.max_clusters)


class OnFailure(StrEnum):
    """What a rollout does past maxFailures or its progress deadline."""

    HALT = "Halt"
    ROLLBACK = "Rollback"


class Strategy(StrictModel):
    """How the fleet moves: the canary, the waves and the health gate between them."""

    canary: LabelSelector | None = Field(
        default=None,
        description="The first wave: the selected ClusterPlugins that also carry these labels.",
    )
    waves: list[Wave] = Field(
        min_length=1,
        description=(
            "The waves after the canary, in order. A cluster lands in the first wave whose "
            "selector it matches and whose share its stable bucket (a hash of its uid) falls "
            "in; the last wave usually has no maxClusters (everyone left)."
        ),
    )
    soak_seconds: int = Field(
        default=300,
        alias="soakSeconds",
        ge=0,
        le=604800,
        description=(
            "How long every cluster of the open waves must have been healthy at the target "
            "before the next wave opens, e.g. 300."
        ),
    )
    progress_deadline_seconds: int = Field(
        default=3600,
        alias="progressDeadlineSeconds",
        ge=60,
        le=604800,
        description=(
            "How long a wave may take, from its opening (or the rollout's resumption), until "
            "every cluster in it is healthy and soaked; past it each admitted cluster not "
            "healthy counts as failed (maxFailures), an unreachable one included."
        ),
    )
    max_failures: int = Field(
        default=0,
        alias="maxFailures",
        ge=0,
        description=(
            "Failed clusters tolerated (their own upgrade failed, or not healthy within the "
            "progress deadline); one more and the rollout fails (onFailure). A rollout with "
            "tolerated failures opens its next waves but is not Complete until they are healthy."
        ),
    )
    on_failure: OnFailure = Field(
        default=OnFailure.HALT,
        alias="onFailure",
        description=(
            "Halt (default): no new cluster is admitted, the admitted ones stay where they are. "
            "Rollback: every admitted cluster goes back to what its Composition and spec ask "
            "for (its last healthy version), chart then IAM, through its own health gate."
        ),
    )
    paused: bool = Field(
        default=False,
        description=(
            "No new wave opens while true (the admitted clusters go on); the progress "
            "deadline counts again from the resumption."
        ),
    )


class RolloutSpec(StrictModel):
    """A ClusterPluginRollout: which ClusterPlugins, what they move to, how."""

    selector: LabelSelector = Field(
        description="The ClusterPlugins it moves, by label, across namespaces.",
    )
    target: Target = Field(description="What every admitted cluster moves to.")
    strategy: Strategy = Field(description="The canary, the waves and the health gate.")


class Phase(StrEnum):
    """``status.phase`` of a rollout."""

    PROGRESSING = "Progressing"
    PAUSED = "Paused"
    HALTED = "Halted"
    COMPLETE = "Complete"
    ROLLED_BACK = "RolledBack"


# A rollout that failed stays so for its revision: only a new target starts again.
FAILED_PHASES = frozenset({Phase.HALTED, Phase.ROLLED_BACK})


class OpenWave(StrictModel):
    """``status.waves[]``: a wave that has opened, as every ClusterPlugin reads it."""

    name: str = Field(description="canary, or wave-1, wave-2, ... (strategy.waves order).")
    threshold: float | None = Field(
        default=None,
        description=(
            "Clusters whose bucket (a hash of their uid, in [0, 1)) is below it are in this "
            "wave, if its selector matches them; only ever grows from wave to wave, so no "
            "admitted cluster is reshuffled."
        ),
    )
    opened_at: str = Field(alias="openedAt", description="When it opened (RFC 3339).")


class ClusterCount(StrictModel):
    """``status.counts``."""

    selected: int = Field(default=0, description="ClusterPlugins the selector matches.")
    admitted: int = Field(default=0, description="Of them, in an open wave.")
    updated: int = Field(default=0, description="Reporting the target revision running.")
    healthy: int = Field(default=0, description="Running it healthy for soakSeconds.")
    failed: int = Field(
        default=0,
        description=(
            "Whose upgrade to the target failed, or not healthy within the progress deadline."
        ),
    )
    skipped: int = Field(
        default=0,
        description=(
            "Paused in Cluster API, being deleted, unreachable before admission, pinned, or "
            "following another rollout."
        ),
    )


class ClusterNote(StrictModel):
    """A failed or skipped cluster and why."""

    name: str = Field(description="<namespace>/<name> of the ClusterPlugin.")
    reason: str = Field(description="Why, in the ClusterPlugin's words.")


class Settled(StrictModel):
    """``status.settled``: the last target the rollout completed."""

    revision: str = Field(description="Its revision.")
    target: Target = Field(description="What every cluster not admitted to a newer one keeps.")


class RolloutStatus(StrictModel):
    """The rollout's status, written by the function (the XRD's status schema)."""

    revision: str = Field(default="", description="Digest of spec.target now rolling out.")
    phase: Phase | None = Field(
        default=None, description="Progressing, Paused, Halted, Complete or RolledBack."
    )
    wave: str = Field(default="", description="The last wave opened.")
    waves: list[OpenWave] = Field(default_factory=list, description="The waves opened.")
    progress_since: str = Field(
        default="",
        alias="progressSince",
        description="Since when the open wave has had to make progress (RFC 3339).",
    )
    counts: ClusterCount = Field(default_factory=ClusterCount, description="The fleet.")
    failed: list[ClusterNote] = Field(
        default_factory=list,
        description=(
            "The clusters that failed, or that were not healthy when the progress deadline "
            "stopped the rollout; named until a new target starts again."
        ),
    )
    skipped: list[ClusterNote] = Field(
        default_factory=list,
        description=(
            "Skipped clusters: paused, being deleted, unreachable before they were admitted, "
            "pinned, or following another rollout that selects them too."
        ),
    )
    conflicts: list[ClusterNote] = Field(
        default_factory=list,
        description=(
            "Clusters this rollout moves that other rollouts select too (those skip them): "
            "narrow one of the selectors."
        ),
    )
    message: str = Field(default="", description="What the rollout waits for, or why it failed.")
    settled: Settled | None = Field(
        default=None,
        description=(
            "The last target this rollout completed: clusters not admitted to a newer target "
            "keep it, and a rolled-back one returns to it."
        ),
    )


def revision(target: dict[str, Any]) -> str:
    """The target's identity: a digest of its canonical JSON."""
    data = json.dumps(target, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(data).hexdigest()[:12]


def bucket(uid: str) -> float:
    """A ClusterPlugin's stable place in [0, 1): the first 32 bits of SHA-256 of its uid.

    Exact in a double, the same in every process (unlike ``hash()``), and spread evenly, so a
    threshold admits the share it was computed for and a cluster keeps its place for ever.
    """
    return int.from_bytes(hashlib.sha256(uid.encode()).digest()[:4], "big") / 2**32


# The bucket step: a threshold just above a bucket admits it and nothing beyond it.
BUCKET_STEP = 1 / 2**32


def wave_name(index: int) -> str:
    """strategy.waves[index]'s name in the status."""
    return f"wave-{index + 1}"


def wave_of(
    strategy: Strategy, opened: list[OpenWave], labels: dict[str, str], place: float
) -> str | None:
    """The open wave a cluster with ``labels`` and bucket ``place`` is in, or None.

    The canary first (by its selector), then each opened wave in order: its selector (if any)
    must match and the bucket must be below its threshold (none: every cluster it matches).
    """
    for wave in opened:
        if wave.name == CANARY:
            if strategy.canary is not None and strategy.canary.matches(labels):
                return CANARY
            continue
        if strategy.canary is not None and strategy.canary.matches(labels):
            return None  # a canary cluster is only ever in the canary
        index = int(wave.name.removeprefix("wave-")) - 1
        if not 0 <= index < len(strategy.waves):
            continue
        selector = strategy.waves[index].selector
        if selector is not None and not selector.matches(labels):
            continue
        if wave.threshold is None or place < wave.threshold:
            return wave.name
    return None
