"""Helm Releases: chart source, values merged over what the function computes."""

from __future__ import annotations

from typing import Any

from function.context import CallContext
from function.graph import ROLLBACK_LIMIT, Release, ValuesPath

IRSA_ANNOTATION = "eks.amazonaws.com/role-arn"


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged onto ``base``: maps merge key by key, anything else replaces."""
    out = dict(base)
    for k, v in over.items():
        cur = out.get(k)
        out[k] = deep_merge(cur, v) if isinstance(cur, dict) and isinstance(v, dict) else v
    return out


def owned_problems(
    user: dict[str, Any], owned: tuple[ValuesPath, ...], field: str
) -> list[tuple[str, str]]:
    """(field, message) for each key the function owns that user values set."""
    problems = []
    for path in owned:
        node: Any = user
        for depth, key in enumerate(path):
            if not isinstance(node, dict):
                # A scalar where the function needs a map also fights the owned key.
                bad = ".".join(path[:depth])
                problems.append(
                    (
                        f"{field}.{bad}",
                        f"must be an object: the function sets {'.'.join(path)} under it",
                    )
                )
                break
            if key not in node:
                break
            node = node[key]
        else:
            problems.append(
                (
                    f"{field}.{'.'.join(path)}",
                    "is set by the function and cannot be overridden in values; remove it",
                )
            )
    return problems


def service_account(name: str, role_arn: str | None) -> dict[str, Any]:
    """A chart's ServiceAccount values: the exact name the trust policy names, and the role."""
    sa: dict[str, Any] = {"name": name}
    if role_arn:
        sa["annotations"] = {IRSA_ANNOTATION: role_arn}
    return sa


# provider-helm stores waitTimeout as a Go duration ("10m" comes back "10m0s"): written in
# its own form, the spec Crossplane applies equals what the provider keeps, and a wait: true
# Release is not given a new generation by every apply.
WAIT_TIMEOUT = "10m0s"


def chart_version(ctx: CallContext, decl: Release, version: str | None) -> str:
    """The chart version ``decl`` installs.

    The XR's ``version``, else an admitted rollout's target (``CallContext.rollout``), else the
    Composition's (the step input's), else the default for the cluster's Kubernetes minor
    (``CallContext.chart_default``).
    """
    if version:
        return version
    rolled = ctx.rollout.versions.get(decl.node) if ctx.rollout is not None else None
    if rolled:
        return rolled
    chart = decl.chart(ctx.step.charts)
    return chart.version or ctx.chart_default(chart.name, decl.node)


def release(
    ctx: CallContext,
    decl: Release,
    *,
    values: dict[str, Any],
    version: str | None = None,
    user_values: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A provider-helm Release of ``decl``'s chart into its namespace of the workload cluster."""
    chart = decl.chart(ctx.step.charts)
    chart_spec: dict[str, Any] = {
        "name": chart.name,
        "repository": chart.repository,
        "version": chart_version(ctx, decl, version),
    }
    if chart.pull_secret_ref:
        chart_spec["pullSecretRef"] = ctx.flavour.local_secret_ref(
            chart.pull_secret_ref.name, chart.pull_secret_ref.namespace
        )
    rolled = ctx.rollout.values.get(decl.node) if ctx.rollout is not None else None
    if rolled:  # the rollout's values under the XR's own
        values = deep_merge(values, rolled)
    for_provider: dict[str, Any] = {
        "chart": chart_spec,
        "namespace": decl.namespace,
        "values": deep_merge(values, user_values or {}) if user_values else values,
    }
    if decl.take_ownership:
        for_provider["takeOwnership"] = True
    if decl.wait:
        # Readiness then means the workloads are up, not just "helm says deployed":
        # later stages (webhooks, CRD consumers) depend on them serving.
        for_provider["wait"] = True
        for_provider["waitTimeout"] = WAIT_TIMEOUT
    return ctx.flavour.release(
        {"forProvider": for_provider, "rollbackLimit": ROLLBACK_LIMIT}, release_name=decl.name
    )
