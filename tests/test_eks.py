"""EKS as a target (docs/architecture.md, "EKS"): the External issuer read from the
AWSManagedControlPlane."""

from __future__ import annotations

from typing import Any

from function.world import World
from tests.scenarios import EKS_ISSUER, EKS_PROVIDER, by_name, find


def _control_plane(world: World) -> dict[str, Any]:
    return find(world.required, "AWSManagedControlPlane")


def _plugin(world: World, name: str) -> dict[str, Any]:
    return next(p for p in world.xr["status"]["plugins"] if p["name"] == name)


def test_the_issuer_left_out_is_the_control_planes_once_capa_wrote_it() -> None:
    world = by_name("external-eks").world(staged=False)
    cp = _control_plane(world)
    arn = cp["status"].pop("oidcProvider")["arn"]
    for rec in world.run(4):
        assert rec.fatal is None, rec.fatal
    # Nothing trusts a provider not known yet: the roles wait, saying for what.
    assert not any(name.endswith("-role") for name in world.composed)
    assert _plugin(world, "vpc-cni")["waitingFor"] == "AWSManagedControlPlane status.oidcProvider.arn"
    assert "issuerURL" not in world.xr["status"]
    assert not world.xr_ready
    cp["status"]["oidcProvider"] = {"arn": arn}
    world.run(12)
    assert world.xr_ready and not world.deletions
    assert world.xr["status"]["issuerURL"] == EKS_ISSUER
    assert world.xr["status"]["oidcProviderARN"] == EKS_PROVIDER == arn


def test_given_and_read_issuers_compose_the_same() -> None:
    read = by_name("external-eks").world(staged=False)
    given = by_name("external-eks-given").world(staged=False)
    read.run(12)
    given.run(12)
    assert read.xr_ready and given.xr_ready
    assert {n: c.obj for n, c in read.composed.items()} == {
        n: c.obj for n, c in given.composed.items()
    }
