"""provider-aws v2.5.0 and the SecurityGroupIngressRule the function composes, against moto.

v2.5.0 never creates such a rule (crossplane-contrib/provider-upjet-aws#2003, #2085): its first
Observe of a rule that does not exist yet fails with "Missing Resource Identity After Read". No
provider that creates them can be built from the Go module proxy (docs/development.md, "Development"), so this
does not show the rules working. It shows what the real provider says of one the function
composed, and that the function reads it as it should: ``SecurityGroupsReady`` False with reason
``ProviderVersion``, naming the rule, the provider version and the fix, instead of Composing.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from e2e.aws.conftest import POLL_S
from e2e.aws.provider import AwsControlPlane, Moto
from e2e.controlplane.composite import conditions
from e2e.controlplane.processes import Process
from function import fn, structs
from function_tools.in_memory_crossplane import InMemoryCrossplane
from tests.scenarios import example, find

NAMESPACE = "team-sg"
RULE = "sg-vpc-cni-all-node-from-cp"


def _composed_rules(groups: dict[str, str], runner: Any = fn.run) -> InMemoryCrossplane:
    """examples/selfhosted-full with your own groups (moto's), which the function composes rules onto."""
    xr, required = example("selfhosted-full")
    find(required, "AWSCluster")["spec"]["network"]["securityGroupOverrides"] = groups
    return InMemoryCrossplane(copy.deepcopy(xr), required, runner=runner)


def test_the_provider_never_creates_the_rule_and_security_groups_ready_says_why(
    aws_control_plane: AwsControlPlane, real_provider_aws: Process, moto: Moto
) -> None:
    ec2 = moto.clients.ec2
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    groups = {
        role: ec2.create_security_group(GroupName=f"e2e-{role}", Description=role, VpcId=vpc)["GroupId"]
        for role in ("controlplane", "node")
    }
    world = _composed_rules(groups)
    world.run(3)
    body = copy.deepcopy(world.composed[RULE].obj)
    assert body["kind"] == "SecurityGroupIngressRule", body
    assert body["spec"]["forProvider"]["securityGroupId"] == groups["node"]
    kube = aws_control_plane.kube
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    rule = {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "metadata": {"name": "e2e-rule", "namespace": NAMESPACE},
        "spec": body["spec"],
    }
    kube.create(rule)
    started = time.monotonic()
    try:
        observed = kube.wait_for(
            lambda: _synced_false(kube.get(rule["apiVersion"], rule["kind"], "e2e-rule", NAMESPACE)),
            "the rule's Synced condition",
            timeout_s=3 * POLL_S + 60,
            interval_s=1,
        )
        print(f"\nSecurityGroupIngressRule Synced=False after {time.monotonic() - started:.0f}s: {conditions(observed)['Synced']}")
        synced = conditions(observed)["Synced"]
        assert "Missing Resource Identity After Read" in synced.get("message", ""), conditions(observed)
        assert conditions(observed).get("Ready", {}).get("status") != "True", conditions(observed)
        # And moto got no rule: the provider never tried to create it.
        (node,) = ec2.describe_security_groups(GroupIds=[groups["node"]])["SecurityGroups"]
        assert node["IpPermissions"] == [], node["IpPermissions"]

        # What the function makes of the provider's own conditions on its rule.
        said = observed["status"]["conditions"]

        def provider(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
            if RULE in req.observed.resources:
                structs.update(req.observed.resources[RULE].resource, {"status": {"conditions": said}})
            return fn.run(req)

        world.runner = provider
        world.run(1)
        sg = next(c for c in world.xr["status"]["conditions"] if c["type"] == "SecurityGroupsReady")
        assert (sg["status"], sg["reason"]) == ("False", "ProviderVersion"), sg
        assert RULE in sg["message"] and "v2.6.0 or later" in sg["message"], sg
    finally:
        # The provider cannot observe the rule, so it cannot delete it either: let it go.
        kube.patch(rule["apiVersion"], rule["kind"], "e2e-rule", {"metadata": {"finalizers": []}}, NAMESPACE)
        kube.delete(rule["apiVersion"], rule["kind"], "e2e-rule", NAMESPACE)
        for group in groups.values():
            ec2.delete_security_group(GroupId=group)
        ec2.delete_vpc(VpcId=vpc)


def _synced_false(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    if obj is None:
        return None
    synced = conditions(obj).get("Synced")
    return obj if synced is not None and synced.get("status") == "False" else None

