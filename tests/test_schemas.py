"""Every composed resource of every scenario validates against its real CRD (CEL included),
every Helm values object against its chart's values.schema.json where the chart has one, and
every status the function writes against our XRD's status schema.

This is the project's main guard: a field the provider would reject, a CEL rule
broken, a values key a strict chart refuses, all fail here.
"""

from __future__ import annotations

import pytest
from crossplane.function import resource

from tests.helm import UNVENDORED
from tests.kube_schema import (
    has_values_schema,
    validate,
    validate_values,
    vendored_charts,
    xr_status_errors,
)
from tests.scenarios import SCENARIO_IDS, SCENARIOS, Scenario, staged_control_plane

COUNTS: dict[str, int] = {}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_every_composed_resource_validates(scenario: Scenario) -> None:
    world = scenario.world()
    validated = values_checked = 0
    kinds: set[str] = set()
    errors: list[str] = []
    for rec in world.run(20, before=staged_control_plane()):
        assert rec.fatal is None, rec.fatal
        # The status the function writes, as the XRD's status schema has it (not pruned).
        status = resource.struct_to_dict(rec.response.desired.composite.resource)["status"]
        errors += [f"step {rec.step} status: {e}" for e in xr_status_errors(world.xr["kind"], status)]
        for name, r in rec.response.desired.resources.items():
            body = resource.struct_to_dict(r.resource)
            kinds.add(f"{body['apiVersion']}/{body['kind']}")
            errors += [f"step {rec.step} {name}: {e}" for e in validate(body)]
            validated += 1
            if body["kind"] == "Release":
                release = body["metadata"]["annotations"]["crossplane.io/external-name"]
                assert len(release) <= 53, release
                # The chart's own values.schema.json, read from its vendored package
                # (tests/test_helm.py renders every Release with helm as well).
                chart = body["spec"]["forProvider"]["chart"]
                key = (chart["name"], chart["version"])
                if key not in vendored_charts():
                    assert key in UNVENDORED.get(scenario.name, {}), f"{key} is not vendored"
                elif has_values_schema(*key):
                    values = body["spec"]["forProvider"]["values"]
                    errors += [
                        f"step {rec.step} {name} values: {e}"
                        for e in validate_values(chart["name"], values, chart["version"])
                    ]
                    values_checked += 1
    assert not errors, "\n".join(errors[:20])
    assert world.xr_ready, f"{scenario.name} never became ready"
    # The scenario really exercised something: every stage reached Ready.
    assert validated > 20
    COUNTS[scenario.name] = validated
    if scenario.example == "selfhosted-full" and scenario.name not in {
        "irsa-disabled",
        "no-webhook-no-cni",
    }:
        assert values_checked > 0, "no strict-schema chart values were checked"


def test_flavours_compose_the_right_kinds() -> None:
    """Namespaced XRs compose only .m. kinds and protection Usages; legacy XRs the cluster-scoped ones."""
    for scenario, namespaced in (
        (SCENARIOS[0], True),
        (next(s for s in SCENARIOS if s.name == "selfhosted-legacy-xr"), False),
    ):
        world = scenario.world(staged=False)
        world.run(12)
        groups = {c.obj["apiVersion"].rpartition("/")[0] for c in world.composed.values()}
        if namespaced:
            assert groups <= {
                "s3.aws.m.upbound.io",
                "iam.aws.m.upbound.io",
                "ec2.aws.m.upbound.io",
                "helm.m.crossplane.io",
                "protection.crossplane.io",
            }, groups
            for c in world.composed.values():
                assert "deletionPolicy" not in c.obj["spec"]
                ref = c.obj["spec"].get("providerConfigRef")
                if ref is not None:
                    assert set(ref) == {"name", "kind"}
        else:
            assert groups <= {
                "s3.aws.upbound.io",
                "iam.aws.upbound.io",
                "ec2.aws.upbound.io",
                "helm.crossplane.io",
                "apiextensions.crossplane.io",
            }, groups
        assert any(c.obj["kind"] == "Usage" for c in world.composed.values())
