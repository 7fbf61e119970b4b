"""Which Kubernetes minors each add-on chart version supports, and the default per minor.

The table is ``function/data/kubernetes-compatibility.json``: per chart (keyed by the
Helm chart's name, as ``ChartSource.name`` spells it: Calico and IRSA install two charts
each), rows of chart versions with the lowest and highest minor the add-on's own
compatibility documentation gives, one source per row, and per minor the newest vendored
chart version that supports it (docs/architecture.md, "Kubernetes compatibility").

A bound the source does not document is None: such a range says nothing against a minor
on that side. The table is read once per process; lookups are dictionary and tuple work.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources

Minor = tuple[int, int]

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+|x)([-+][0-9A-Za-z.-]+)?$")
_MINOR = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?")
# Sorts after every patch number: "1.21.x" as the last version of a row.
_ANY_PATCH = 1 << 31


@functools.lru_cache(maxsize=1024)
def _version_key(version: str) -> tuple[int, int, int, int] | None:
    """A chart version's order (a pre-release before its release), or None if not one."""
    m = _VERSION.match(version)
    if m is None:
        return None
    patch = _ANY_PATCH if m.group(3) == "x" else int(m.group(3))
    pre = m.group(4) is not None and m.group(4).startswith("-")
    return (int(m.group(1)), int(m.group(2)), patch, 0 if pre else 1)


@functools.lru_cache(maxsize=1024)
def minor_of(version: str) -> Minor | None:
    """(major, minor) of a Kubernetes version or minor: ``v1.33.2``, ``1.33``."""
    m = _MINOR.match(version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _minor_text(minor: Minor) -> str:
    return f"{minor[0]}.{minor[1]}"


@dataclass(frozen=True)
class Source:
    """Where a row comes from: a URL, the tag/commit or date it was read at, its words."""

    url: str
    ref: str
    says: str


@dataclass(frozen=True)
class MinorRange:
    """The Kubernetes minors a chart version supports; None where no bound is documented."""

    low: Minor | None
    high: Minor | None
    source: Source
    bounds: str  # how the source's words became these bounds

    def __contains__(self, minor: object) -> bool:
        if not isinstance(minor, tuple):
            return False
        return (self.low is None or self.low <= minor) and (
            self.high is None or minor <= self.high
        )

    def describe(self) -> str:
        """One line for messages: ``1.29 to 1.35``, ``1.22 and later``, ``up to 1.32``."""
        if self.low is not None and self.high is not None:
            if self.low == self.high:
                return _minor_text(self.low)
            return f"{_minor_text(self.low)} to {_minor_text(self.high)}"
        if self.low is not None:
            return f"{_minor_text(self.low)} and later"
        if self.high is not None:
            return f"up to {_minor_text(self.high)}"
        return "any Kubernetes minor (no bound documented)"


@dataclass(frozen=True)
class _Row:
    first: tuple[int, int, int, int]
    last: tuple[int, int, int, int]
    range: MinorRange


@dataclass(frozen=True)
class _Chart:
    addon: str
    rows: tuple[_Row, ...]
    defaults: dict[Minor, str]


def _parse_minor(text: str | None) -> Minor | None:
    if text is None:
        return None
    minor = minor_of(text)
    if minor is None:
        msg = f"{text!r} is not a Kubernetes minor"
        raise ValueError(msg)
    return minor


def _key(text: str) -> tuple[int, int, int, int]:
    key = _version_key(text)
    if key is None:
        msg = f"{text!r} is not a chart version"
        raise ValueError(msg)
    return key


@functools.cache
def _table() -> dict[str, _Chart]:
    raw = resources.files("function.data").joinpath("kubernetes-compatibility.json")
    data = json.loads(raw.read_text(encoding="utf-8"))
    charts = {}
    for name, chart in data["charts"].items():
        rows = []
        for row in chart["rows"]:
            first, last = row["versions"]
            low, high = row["kubernetes"]
            source = Source(**row["source"])
            rng = MinorRange(_parse_minor(low), _parse_minor(high), source, row["bounds"])
            rows.append(_Row(_key(first), _key(last), rng))
        defaults: dict[Minor, str] = {}
        for text, version in chart["defaults"].items():
            minor = _parse_minor(text)
            if minor is not None and version is not None:
                defaults[minor] = version
        charts[name] = _Chart(chart["addon"], tuple(rows), defaults)
    return charts


def charts() -> tuple[str, ...]:
    """The chart names the table knows."""
    return tuple(_table())


def addon_of(chart: str) -> str | None:
    """The add-on (``Addon.name``) that installs ``chart``, or None for an unknown chart."""
    entry = _table().get(chart)
    return entry.addon if entry else None


@functools.lru_cache(maxsize=256)
def supported(chart: str, version: str) -> MinorRange | None:
    """The minors ``chart`` at ``version`` supports, or None if the table does not know it.

    None means nothing is documented either way: the chart or the version is not in a row.
    """
    entry = _table().get(chart)
    key = _version_key(version)
    if entry is None or key is None:
        return None
    return next((r.range for r in entry.rows if r.first <= key <= r.last), None)


def default_version(chart: str, minor: Minor) -> str | None:
    """The default version of ``chart`` for a cluster at ``minor``, or None if there is none.

    The default is the newest vendored version of the chart that supports the minor.
    """
    entry = _table().get(chart)
    return entry.defaults.get(minor) if entry else None


def describe(minors: MinorRange) -> str:
    """One line for messages: ``1.29 to 1.35``."""
    return minors.describe()


@functools.lru_cache(maxsize=1024)
def default_for(chart: str, minors: tuple[Minor, ...]) -> str | None:
    """The default of ``chart`` for a control plane at every one of ``minors``, or None.

    ``minors``: the one it runs and, while it moves to the next, that one too. The newest of
    the minors' defaults that the table says supports them all; if none does, the first
    minor's (the one the control plane runs): it runs there now.
    """
    entry = _table().get(chart)
    if entry is None or not minors:
        return None
    candidates = sorted(
        {v for m in minors if (v := entry.defaults.get(m)) is not None},
        key=_key,
        reverse=True,
    )
    for version in candidates:
        rng = supported(chart, version)
        if rng is not None and all(m in rng for m in minors):
            return version
    return entry.defaults.get(minors[0])


def newest_default(chart: str) -> str | None:
    """The default of ``chart`` for the newest minor the table knows, or None."""
    entry = _table().get(chart)
    if entry is None or not entry.defaults:
        return None
    return entry.defaults[max(entry.defaults)]


@functools.lru_cache(maxsize=1024)
def cluster_minors(running: str, target: str) -> tuple[Minor, ...]:
    """The minors a default must suit: the control plane's, and while it moves, the next one.

    ``running``: the version it runs; ``target``: the one it moves to, if any. () while the
    running one is not known.
    """
    now, then = minor_of(running), minor_of(target)
    if now is None:
        return ()
    return (now,) if then is None or then == now else (now, then)


@functools.lru_cache(maxsize=1024)
def default_not_older(chart: str, minors: tuple[Minor, ...], runs: str) -> str | None:
    """``default_for`` the ``minors`` (else the newest default), never older than what runs.

    ``runs``: the chart version the release runs ("" for none): a default does not downgrade.
    None when no default is known and nothing runs.
    """
    version = default_for(chart, minors) or newest_default(chart)
    if version is None:
        return runs or None
    return runs if runs and newer(runs, version) else version


@functools.lru_cache(maxsize=1024)
def newer(a: str, b: str) -> bool:
    """Whether chart version ``a`` comes after ``b`` (False when either is not a version)."""
    ka, kb = _version_key(a), _version_key(b)
    return ka is not None and kb is not None and ka > kb


@functools.lru_cache(maxsize=1024)
def at_least(version: str, first: str) -> bool:
    """Whether chart version ``version`` is ``first`` or later (False when not a version)."""
    kv, kf = _version_key(version), _version_key(first)
    return kv is not None and kf is not None and kv >= kf


def minor_text(minor: Minor) -> str:
    """``1.33``."""
    return _minor_text(minor)
