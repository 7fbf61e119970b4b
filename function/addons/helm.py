"""Helm Releases: chart source, values merged over what the function computes."""

from __future__ import annotations

from typing import Any

from function.graph import Ctx
from function.spec import ChartSource, InvalidInputError

IRSA_ANNOTATION = "eks.amazonaws.com/role-arn"

Path = tuple[str, ...]


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged onto ``base``: maps merge key by key, anything else replaces."""
    out = dict(base)
    for k, v in over.items():
        cur = out.get(k)
        out[k] = deep_merge(cur, v) if isinstance(cur, dict) and isinstance(v, dict) else v
    return out


def check_owned(user: dict[str, Any], owned: tuple[Path, ...], field: str) -> None:
    """Raise InvalidInputError if user values set a key the function owns."""
    for path in owned:
        node: Any = user
        for depth, key in enumerate(path):
            if not isinstance(node, dict):
                # A scalar where the function needs a map also fights the owned key.
                bad = ".".join(path[:depth])
                raise InvalidInputError(
                    f"{field}.{bad}",
                    f"must be an object: the function sets {'.'.join(path)} under it",
                )
            if key not in node:
                break
            node = node[key]
        else:
            raise InvalidInputError(
                f"{field}.{'.'.join(path)}",
                "is set by the function and cannot be overridden in values; remove it",
            )


def service_account(name: str, role_arn: str | None) -> dict[str, Any]:
    """A chart's ServiceAccount values: the exact name the trust policy names, and the role."""
    sa: dict[str, Any] = {"name": name}
    if role_arn:
        sa["annotations"] = {IRSA_ANNOTATION: role_arn}
    return sa


def release(
    ctx: Ctx,
    *,
    chart: ChartSource,
    version: str | None,
    namespace: str,
    release_name: str,
    values: dict[str, Any],
    user_values: dict[str, Any] | None = None,
    wait: bool = False,
) -> dict[str, Any]:
    """A provider-helm Release of ``chart`` into ``namespace`` of the workload cluster."""
    chart_spec: dict[str, Any] = {
        "name": chart.name,
        "repository": chart.repository,
        "version": version or chart.version,
    }
    if chart.pull_secret_ref:
        chart_spec["pullSecretRef"] = ctx.flavour.local_secret_ref(
            chart.pull_secret_ref.name, chart.pull_secret_ref.namespace
        )
    for_provider: dict[str, Any] = {
        "chart": chart_spec,
        "namespace": namespace,
        "values": deep_merge(values, user_values or {}) if user_values else values,
    }
    if wait:
        # Readiness then means the workloads are up, not just "helm says deployed":
        # later stages (webhooks, CRD consumers) depend on them serving.
        for_provider["wait"] = True
        for_provider["waitTimeout"] = "10m"
    return ctx.flavour.release(
        {"forProvider": for_provider, "rollbackLimit": 3}, release_name=release_name
    )
