"""The README's install for Crossplane 1.x, carried out on a real Crossplane 1.20 from a registry.

On a Crossplane 1.20 control plane of its own (``core_1.CrossplaneOneControlPlane``) trusting the
test registry's CA, with the release of ``make release`` pushed there, the README's steps for a
1.x user ("apply ``install/legacy/`` instead of ``install/namespaced/``"):

1. ``kubectl apply -f install/legacy/`` (the ClusterRole and the legacy Configuration, built for
   "1.17+, claims"). 1.20's package manager resolves the function dependency from the registry,
   and the providers through docs/installing.md's ``ImageConfig`` mirror (stand-ins in the same registry).
2. Step 4's ``ProviderConfig``, and a claim (examples/calico-legacy-claim), which converges
   through the Function Crossplane installed. The claim selects the example's own Composition
   (its cluster's CAPI serves only v1beta1), with ``functionRef`` set to the name the
   package's Composition calls, as docs/input.md's table says.

As in test_install.py, no Deployment runs a package's image (``--package-runtime=External``):
the harness plays the runtime of the Function (the checkout's function, with mTLS) and of the
stand-in providers (the driver).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.controlplane.checks import assert_converged_like_the_world
from e2e.controlplane.composite import Composite, condition_status, conditions
from e2e.controlplane.conftest import running_control_plane
from e2e.controlplane.core_1 import CrossplaneOneControlPlane
from e2e.controlplane.driver import Providers
from e2e.controlplane.harness import PARENT_PACKAGE_LABEL, ControlPlane
from e2e.controlplane.install import (
    PKG,
    PROVIDER_NAMES,
    QuickStart,
    condition,
    legacy_example_composition,
)
from e2e.registry import LocalRegistry, PublishedRelease
from function.flavour import LEGACY_XR

NAMESPACE = "platform"


@dataclass
class Installed:
    quick_start: QuickStart
    composite: Composite
    package_composition: dict[str, Any]
    seconds: dict[str, float]

    @property
    def cp(self) -> ControlPlane:
        return self.quick_start.cp


@pytest.fixture(scope="module")
def core_1_install(registry: LocalRegistry, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    options = {"crossplane_args": [f"--ca-bundle-path={registry.ca_file}"], "function_package": False}
    with running_control_plane(tmp_path_factory.mktemp("install-crossplane1"), CrossplaneOneControlPlane, **options) as cp:
        yield cp


@pytest.fixture(scope="module")
def installed(
    core_1_install: ControlPlane, published_release: PublishedRelease, provider_mirror: dict[str, Any]
) -> Iterator[Installed]:
    cp = core_1_install
    quick_start = QuickStart(cp, published_release, LEGACY_XR)
    providers = Providers(cp.kube, namespaced=False)
    providers.start()
    try:
        started = time.monotonic()
        quick_start.apply()
        cp.kube.apply(quick_start.mirror(provider_mirror))
        cp.play_function_runtime(published_release.function_name, timeout_s=120)
        for provider in PROVIDER_NAMES:
            cp.play_provider_runtime(provider, timeout_s=120)
        packages = time.monotonic()
        cp.kube.wait_for(
            lambda: cp.package_ready("Configuration", quick_start.configuration_name),
            "the Configuration Installed and Healthy",
            timeout_s=90,
        )
        composition = quick_start.wait_api()
        cp.kube.apply(quick_start.provider_config())
        api = time.monotonic()
        capi_v1beta1 = legacy_example_composition(composition)
        cp.kube.apply(capi_v1beta1)
        composite = Composite(cp, providers, "calico-legacy-claim", capi_v1beta1, NAMESPACE, document="claim.yaml")
        composite.create(staged=False)
        composite.wait_ready(timeout_s=180)
        seconds = {
            "packages": round(packages - started, 1),
            "API": round(api - packages, 1),
            "claim Ready": round(time.monotonic() - api, 1),
        }
        print(f"\nquick start (legacy) on Crossplane 1.20, seconds: {seconds}")
        yield Installed(quick_start, composite, composition, seconds)
    finally:
        providers.stop()


def test_crossplane_1_resolves_the_function_and_the_mirrored_providers(installed: Installed) -> None:
    cp, published = installed.cp, installed.quick_start.release
    name = published.function_name
    function = cp.kube.get(PKG, "Function", name)
    assert function is not None
    assert function["spec"]["package"] == published.artifact("Function")["reference"]
    (revision,) = cp.kube.list(PKG, "FunctionRevision", labels={PARENT_PACKAGE_LABEL: name})
    # 1.20 says "Healthy" of a revision (v2: RevisionHealthy).
    assert condition(revision, "Healthy").get("status") == "True", conditions(revision)
    assert sorted(o["metadata"]["name"] for o in cp.kube.list(PKG, "Provider")) == sorted(PROVIDER_NAMES)
    assert all(cp.package_ready("Provider", p) for p in PROVIDER_NAMES)
    assert [s["functionRef"]["name"] for s in installed.package_composition["spec"]["pipeline"]] == [name]


def test_the_xrd_offers_the_claim_and_the_composition_comes_from_the_package(installed: Installed) -> None:
    installed.quick_start.assert_api_from_package(installed.package_composition)


def test_the_claim_converges_through_it(installed: Installed) -> None:
    claim = installed.composite.resource()
    assert condition_status(claim, "Ready") == "True", conditions(claim)
    assert_converged_like_the_world(installed.composite)
