"""``fleet status``: ClusterPlugins by add-on, version, health, wave and reason, summarised.

Reads what the function wrote: each ClusterPlugin's ``status.plugins[]`` (the chart version
running, its day-two phase) and ``status.rollout`` (its rollout, wave, phase, reason), and each
ClusterPluginRollout's status. Readable at hundreds of clusters: counts per (add-on, version,
state) and per wave, the failed and skipped clusters grouped by reason with a few names each;
``every`` adds one line per cluster.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from crossplane.function import resource

from function.flavour import XR_GROUP, XR_VERSION
from function.rollout.accept import parse
from function.rollout.spec import KIND, PLURAL
from function.spec_base import InvalidInputError

CLUSTER_PLUGIN_KINDS = frozenset({"ClusterPlugin", "XClusterPlugin"})
# How many names a group shows before "and N more".
NAMES = 5


def split(
    objects: Iterable[Mapping[str, Any]],
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """(ClusterPluginRollouts, ClusterPlugins) among ``objects`` (Lists unpacked)."""
    rollouts, plugins = [], []
    for obj in objects:
        if obj.get("kind", "").endswith("List") and isinstance(obj.get("items"), list):
            more_rollouts, more_plugins = split(obj["items"])
            rollouts += more_rollouts
            plugins += more_plugins
        elif obj.get("kind") == KIND:
            rollouts.append(obj)
        elif obj.get("kind") in CLUSTER_PLUGIN_KINDS and "resourceRef" not in obj.get("spec", {}):
            # A legacy claim (spec.resourceRef) says nothing its XClusterPlugin does not.
            plugins.append(obj)
    return rollouts, plugins


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata", {})
    return "/".join(p for p in (meta.get("namespace"), meta.get("name")) if p)


def _names(keys: list[str]) -> str:
    shown = ", ".join(sorted(keys)[:NAMES])
    return shown + (f" and {len(keys) - NAMES} more" if len(keys) > NAMES else "")


def _rollout_lines(rollout: Mapping[str, Any]) -> list[str]:
    name = rollout.get("metadata", {}).get("name", "")
    try:
        parse(resource.dict_to_struct(dict(rollout.get("spec", {}))))
    except InvalidInputError as err:
        return [f"rollout {name}: refused: {err}"]
    status = rollout.get("status", {})
    counts = status.get("counts", {})
    wave = status.get("wave") or "no wave"
    line = f"rollout {name}: {status.get('phase', 'not started')}, {wave} open; " + ", ".join(
        f"{int(counts.get(k, 0))} {k}"
        for k in ("selected", "admitted", "updated", "healthy", "failed", "skipped")
    )
    out = [line]
    if status.get("message"):
        out.append(f"  {status['message']}")
    return out


def _state(entry: Mapping[str, Any]) -> str:
    return str(entry.get("upgrade") or entry.get("phase") or "-")


class _Tally:
    """What the summary counts, cluster by cluster."""

    def __init__(self, *, every: bool) -> None:
        self.every = every
        self.by_addon: dict[str, Counter[tuple[str, str]]] = defaultdict(Counter)
        self.waves: Counter[str] = Counter()
        self.groups: dict[str, dict[str, list[str]]] = {
            "failed": defaultdict(list),
            "skipped": defaultdict(list),
            "held": defaultdict(list),
        }
        self.rows: list[str] = []

    def add(self, xr: Mapping[str, Any]) -> None:
        status = xr.get("status", {})
        key = _name(xr)
        entries = status.get("plugins", []) or []
        for entry in entries:
            self.by_addon[str(entry.get("name", ""))][
                (str(entry.get("version") or "-"), _state(entry))
            ] += 1
        report = status.get("rollout") or {}
        phase = report.get("phase", "")
        held = "held" if phase == "Held" else "not admitted"
        wave = report.get("wave") or (held if report else "no rollout")
        self.waves[wave] += 1
        group = {"Failed": "failed", "Skipped": "skipped", "Held": "held"}.get(phase)
        if group is not None:
            self.groups[group][str(report.get("reason", ""))].append(key)
        if self.every:
            versions = " ".join(
                f"{e.get('name')}={e.get('version') or '-'}/{_state(e)}" for e in entries
            )
            self.rows.append(f"  {key}  {wave}  {phase or '-'}  {versions}")

    def lines(self) -> list[str]:
        out = ["by add-on (chart version, state: clusters):"]
        for addon in sorted(self.by_addon):
            cells = ", ".join(f"{v} {s}: {n}" for (v, s), n in sorted(self.by_addon[addon].items()))
            out.append(f"  {addon}: {cells}")
        out.append("by wave: " + ", ".join(f"{w}: {n}" for w, n in sorted(self.waves.items())))
        for title, groups in self.groups.items():
            total = sum(len(v) for v in groups.values())
            if total:
                out.append(f"{title} ({total}):")
                out += [
                    f"  {reason or '-'}: {len(keys)} ({_names(keys)})"
                    for reason, keys in sorted(groups.items())
                ]
        if self.every:
            out += ["clusters:", *sorted(self.rows)]
        return out


def summary(
    rollouts: list[Mapping[str, Any]], plugins: list[Mapping[str, Any]], *, every: bool = False
) -> str:
    """The fleet, grouped and summarised (``every``: one line per cluster as well)."""
    lines: list[str] = []
    for rollout in sorted(rollouts, key=lambda r: r.get("metadata", {}).get("name", "")):
        lines += _rollout_lines(rollout)
    lines.append(f"{len(plugins)} ClusterPlugins")
    tally = _Tally(every=every)
    for xr in plugins:
        tally.add(xr)
    return "\n".join(lines + tally.lines())


def read_cluster(kubeconfig: str) -> list[dict[str, Any]]:
    """Every ClusterPluginRollout, ClusterPlugin and XClusterPlugin the cluster serves."""
    import httpx2  # noqa: PLC0415
    from lightkube import ApiError, Client, KubeConfig  # noqa: PLC0415
    from lightkube.generic_resource import create_global_resource, create_namespaced_resource  # noqa: PLC0415

    client = Client(KubeConfig.from_file(kubeconfig).get(), trust_env=False)
    out: list[dict[str, Any]] = []
    for kind, plural in (
        (KIND, PLURAL),
        ("XClusterPlugin", "xclusterplugins"),
        ("ClusterPlugin", ""),
    ):
        try:
            if plural:
                res = create_global_resource(XR_GROUP, XR_VERSION, kind, plural)
                out += [{**obj.to_dict(), "kind": kind} for obj in client.list(res)]
            else:
                ns_res = create_namespaced_resource(XR_GROUP, XR_VERSION, kind, "clusterplugins")
                out += [{**o.to_dict(), "kind": kind} for o in client.list(ns_res, namespace="*")]
        except ApiError as err:
            if err.status.code != 404:  # a kind the cluster does not serve: none of it
                raise
        except httpx2.HTTPStatusError as err:  # lightkube's list, before it reads a Status
            if err.response.status_code != 404:
                raise
    return out
