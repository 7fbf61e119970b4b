"""SecurityGroupsReady for rules the function composes (docs/architecture.md, "Security groups")."""

from __future__ import annotations

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import fn, structs
from tests.scenarios import by_name

# What provider-aws-ec2 v2.5.0 writes into a SecurityGroupIngressRule it cannot observe before it
# exists (crossplane-contrib/provider-upjet-aws#2003): Synced=False, and the rule is never created.
MISSING_IDENTITY = (
    "observe failed: read resource request failed: Missing Resource Identity After Read: The "
    "Terraform Provider unexpectedly returned no resource identity data after having no errors in "
    "the resource read. This is always an issue in the Terraform Provider and should be reported to "
    "the provider developers."
)
NOT_READY = {"type": "Ready", "status": "False", "reason": "Creating"}


def test_rules_the_provider_never_creates_name_its_version_and_the_fix() -> None:
    """SecurityGroupsReady names the provider version as the cause, and the fix, when a rule's
    Synced=False carries v2.5.0's message; a rule merely not Ready yet is Composing."""
    conditions: dict[str, list[dict[str, str]]] = {}

    def provider(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        # What the provider reports of each rule, in the request Crossplane sends.
        for name, said in conditions.items():
            if name in req.observed.resources:
                structs.update(req.observed.resources[name].resource, {"status": {"conditions": said}})
        return fn.run(req)

    world = by_name("sg-always-vpc-cni").world(staged=False, runner=provider)
    world.run(3)
    rules = sorted(n for n in world.composed if n.startswith("sg-"))
    assert rules
    synced = {"type": "Synced", "status": "False", "reason": "ReconcileError", "message": MISSING_IDENTITY}
    conditions.update({rule: [NOT_READY, synced] for rule in rules})
    (rec,) = world.run(1)
    sg = next(c for c in world.xr["status"]["conditions"] if c["type"] == "SecurityGroupsReady")
    assert (sg["status"], sg["reason"]) == ("False", "ProviderVersion")
    named = sg["message"].removeprefix("the AWS provider never creates ingress rule(s) ").split(":")[0]
    assert set(named.split(" and ")[0].split(", ")) <= set(rules)
    assert named.endswith(f" and {len(rules) - 4} more") == (len(rules) > 4)
    assert (
        'their Synced=False says "Missing Resource Identity After Read", the bug of provider-aws-ec2 '
        "v2.5.0 (crossplane-contrib/provider-upjet-aws#2003, #2085)"
    ) in sg["message"]
    assert "Install provider-aws-ec2 (and provider-family-aws) v2.6.0 or later" in sg["message"]
    assert rec.response is not None
    assert any(
        r.reason == "ProviderVersion" and r.severity == fnv1.SEVERITY_WARNING for r in rec.response.results
    )
    conditions.update({rule: [NOT_READY] for rule in rules})
    world.run(1)
    sg = next(c for c in world.xr["status"]["conditions"] if c["type"] == "SecurityGroupsReady")
    assert (sg["status"], sg["reason"]) == ("False", "Composing")
