"""The legacy Configuration from a registry, with docs/installing.md's other switch: no resolution.

On a control plane of its own (one XRD flavour per API server: the legacy claim's CRD is
the namespaced XR's name), trusting the test registry's CA, docs/installing.md's second way for
when the providers cannot be fetched:

1. ``kubectl apply -f install/legacy/`` (the ClusterRole and the Configuration) with
   ``spec.skipDependencyResolution: true`` on the Configuration. Crossplane installs the
   XRD (offering the claim) and the Composition and no dependency at all, not even the
   function.
2. ``kubectl apply -f function.yaml`` (the Function under the name the Composition calls,
   with the production runtime settings), from the same registry; the providers are
   "installed yourself": their CRDs are the control plane's, their controllers the driver.
3. Step 4's ``ProviderConfig`` and a claim (examples/calico-legacy-claim), which converges
   through that Function. Its cluster's CAPI serves only the v1beta1 contract, so, as the
   docs/input.md's table says, the claim selects the example's own Composition asking for
   v1beta1, applied beside the package's with its ``functionRef`` set to the name the
   package's Composition calls.

As in test_install.py, no Deployment runs the package's image (``--package-runtime=External``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.controlplane.checks import assert_converged_like_the_world
from e2e.controlplane.composite import Composite, condition_status, conditions
from e2e.controlplane.driver import Providers
from e2e.controlplane.harness import PARENT_PACKAGE_LABEL, ControlPlane
from e2e.controlplane.install import PKG, QuickStart, legacy_example_composition, revision_name
from e2e.registry import PublishedRelease
from function.flavour import LEGACY_XR

NAMESPACE = "platform"


@dataclass
class Installed:
    quick_start: QuickStart
    composite: Composite
    # The Configuration package's Composition, as the API server holds it.
    package_composition: dict[str, Any]
    # What existed once the Configuration was installed, before install/function.yaml.
    packages_before_function: dict[str, list[str]]
    lock_before_function: list[dict[str, Any]]

    @property
    def cp(self) -> ControlPlane:
        return self.quick_start.cp


def _skip_dependency_resolution(configuration: dict[str, Any]) -> None:
    configuration["spec"]["skipDependencyResolution"] = True


@pytest.fixture(scope="module")
def installed(install_control_plane: ControlPlane, published_release: PublishedRelease) -> Iterator[Installed]:
    cp = install_control_plane
    quick_start = QuickStart(cp, published_release, LEGACY_XR)
    providers = Providers(cp.kube, namespaced=False)
    providers.start()
    try:
        quick_start.apply(edit=_skip_dependency_resolution)
        composition = quick_start.wait_api()
        cp.kube.wait_for(
            lambda: cp.package_ready("Configuration", quick_start.configuration_name),
            "the Configuration Installed and Healthy",
        )
        packages = {kind: [o["metadata"]["name"] for o in cp.kube.list(PKG, kind)] for kind in ("Function", "Provider")}
        lock = (cp.kube.get("pkg.crossplane.io/v1beta1", "Lock", "lock") or {}).get("packages") or []
        for doc in quick_start.documents("function.yaml"):
            cp.kube.apply(doc)
        cp.play_function_runtime(published_release.function_name)
        cp.kube.apply(quick_start.provider_config())
        capi_v1beta1 = legacy_example_composition(composition)
        cp.kube.apply(capi_v1beta1)
        composite = Composite(cp, providers, "calico-legacy-claim", capi_v1beta1, NAMESPACE, document="claim.yaml")
        composite.create(staged=False)
        composite.wait_ready(timeout_s=120)
        yield Installed(quick_start, composite, composition, packages, lock)
    finally:
        providers.stop()


def test_without_resolution_crossplane_installs_no_dependency(installed: Installed) -> None:
    assert installed.packages_before_function == {"Function": [], "Provider": []}
    # Not even recorded: a package that skips resolution never enters the Lock.
    assert installed.lock_before_function == []


def test_the_xrd_offers_the_claim_and_the_composition_comes_from_the_package(installed: Installed) -> None:
    quick_start = installed.quick_start
    revision = quick_start.configuration_revision()
    assert revision["spec"]["skipDependencyResolution"] is True
    quick_start.assert_api_from_package(installed.package_composition)


def test_install_function_yaml_installs_the_function_the_composition_calls(installed: Installed) -> None:
    cp, published = installed.cp, installed.quick_start.release
    (function,) = [d for d in installed.quick_start.documents("function.yaml") if d["kind"] == "Function"]
    name = function["metadata"]["name"]
    assert name == published.function_name
    assert [s["functionRef"]["name"] for s in installed.package_composition["spec"]["pipeline"]] == [name]
    installed_function = cp.kube.get(PKG, "Function", name)
    assert installed_function is not None
    assert installed_function["spec"]["runtimeConfigRef"] == function["spec"]["runtimeConfigRef"]
    assert installed_function["spec"]["package"] == published.artifact("Function")["reference"]
    (revision,) = cp.kube.list(PKG, "FunctionRevision", labels={PARENT_PACKAGE_LABEL: name})
    digest = published.artifact("Function")["digest"]
    assert revision["metadata"]["name"] == revision_name(name, digest, installed_function["metadata"]["generation"])
    assert cp.package_ready("Function", name)


def test_the_claim_converges_through_it(installed: Installed) -> None:
    claim = installed.composite.resource()
    assert condition_status(claim, "Ready") == "True", conditions(claim)
    assert_converged_like_the_world(installed.composite)
