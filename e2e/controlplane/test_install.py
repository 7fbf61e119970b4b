"""The namespaced Configuration installed from a registry as the README's quick start says.

On a control plane of its own whose Crossplane trusts the test registry's CA, with the
release of ``make release REGISTRY=<registry>/acme/platform`` pushed there
(``make release-push``) and nothing installed by hand but the README's files:

1. ``kubectl apply -f clusterrole.yaml -f configuration.yaml`` from the release's
   ``install/``. The providers' packages (xpkg.crossplane.io) cannot be had here:
   Crossplane installs the function dependency from the registry, then stops at the
   first provider, and the Configuration stays unhealthy with its XRD and Composition
   not created. What it reports is recorded.
2. docs/installing.md's switch for that case: its ``ImageConfig`` mirror, pointed at stand-in
   provider packages in the same registry (``provider_mirror``). Crossplane retries on
   its own and installs them under their original names.
3. The AWS ``ClusterProviderConfig`` of step 4, and an XR (examples/selfhosted-full),
   which converges through the Function Crossplane installed.

What it proves: Crossplane's package manager resolves the Configuration's dependency to
the pushed function package (its revision named after the digest release.json computed)
and installs it under the name the Composition calls; it parses the package's Input CRD
and, as for every function package, does not install it; the XRD and Composition come
from the Configuration package; an XR composed through that Function converges as our
InMemoryCrossplane does; docs/installing.md names what Crossplane reports. What it does not prove: with
``--package-runtime=External`` no Deployment runs the image inside the function package.
The function served is the checkout's (``function-cluster-plugin serve`` with mTLS),
reached through the revision's ``status.endpoint``. The test shows that what the
Deployment runtime would run (the revision's ``status.resolvedImage``) is the package
``make release`` built, carrying the image's layers and entrypoint; e2e/test_image.py
runs that image as its user, and no kubelet here pulls it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.controlplane.checks import assert_converged_like_the_world
from e2e.controlplane.composite import Composite
from e2e.controlplane.driver import Providers
from e2e.controlplane.harness import PARENT_PACKAGE_LABEL, ControlPlane
from e2e.controlplane.install import (
    PKG,
    PROVIDER_NAMES,
    QuickStart,
    condition,
    missing_providers_message,
    revision_name,
)
from e2e.registry import PublishedRelease
from function.flavour import NAMESPACED_XR
from function_tools import apigen
from function_tools.packaging import PROVIDER_REGISTRY, PROVIDERS
from scripts import release
from tests import readme

NAMESPACE = "team-a"


@dataclass
class Installed:
    """The quick start carried out, and what Crossplane said on the way."""

    quick_start: QuickStart
    composite: Composite
    mirror: dict[str, Any]
    # What Crossplane reported once it stopped for want of the providers.
    before_mirror: dict[str, Any]
    seconds: dict[str, float]

    @property
    def cp(self) -> ControlPlane:
        return self.quick_start.cp

    @property
    def release(self) -> PublishedRelease:
        return self.quick_start.release


@pytest.fixture(scope="module")
def installed(
    install_control_plane: ControlPlane, published_release: PublishedRelease, provider_mirror: dict[str, Any]
) -> Iterator[Installed]:
    cp = install_control_plane
    quick_start = QuickStart(cp, published_release, NAMESPACED_XR)
    providers = Providers(cp.kube, namespaced=True)
    providers.start()
    try:
        started = time.monotonic()
        quick_start.apply()
        revision = quick_start.configuration_revision()
        expected = missing_providers_message()

        def refused() -> dict[str, Any] | None:
            got = cp.kube.get(PKG, "ConfigurationRevision", revision["metadata"]["name"])
            configuration = cp.kube.get(PKG, "Configuration", quick_start.configuration_name)
            said = {
                "revision": condition(got, "RevisionHealthy").get("message", ""),
                "configuration": condition(configuration, "Healthy").get("message", ""),
            }
            if not all(message.endswith(expected) for message in said.values()):
                return None
            lock = cp.kube.get("pkg.crossplane.io/v1beta1", "Lock", "lock")
            return {
                **said,
                "lock": condition(lock, "Resolved").get("message", ""),
                "xrd": quick_start.xrd(),
                "packages": {kind: [o["metadata"]["name"] for o in cp.kube.list(PKG, kind)] for kind in ("Function", "Provider")},
            }

        before_mirror = cp.kube.wait_for(refused, f"the ConfigurationRevision unhealthy with {expected!r}", timeout_s=60)
        mirror = quick_start.mirror(provider_mirror)
        cp.kube.apply(mirror)
        mirrored = time.monotonic()
        function_revision = cp.play_function_runtime(published_release.function_name)
        for provider in PROVIDER_NAMES:
            cp.play_provider_runtime(provider, timeout_s=90)
        providers_installed = time.monotonic()
        cp.kube.wait_for(
            lambda: cp.package_ready("Configuration", quick_start.configuration_name),
            "the Configuration Installed and Healthy",
            timeout_s=60,
        )
        composition = quick_start.wait_api()
        cp.kube.apply(quick_start.provider_config())
        api = time.monotonic()
        composite = Composite(cp, providers, "selfhosted-full", composition, NAMESPACE)
        composite.create(staged=False)
        composite.wait_ready(timeout_s=120)
        ready = time.monotonic()
        seconds = {
            "refused": round(mirrored - started, 1),
            "providers after the mirror": round(providers_installed - mirrored, 1),
            "API": round(api - providers_installed, 1),
            "XR Ready": round(ready - api, 1),
        }
        print(f"\nquick start (namespaced), seconds: {seconds}; the Function's revision {function_revision}")
        yield Installed(quick_start, composite, mirror, before_mirror, seconds)
    finally:
        providers.stop()


def test_without_the_providers_crossplane_installs_the_function_and_stops(installed: Installed) -> None:
    refused = installed.before_mirror
    assert refused["revision"] == missing_providers_message()
    assert refused["configuration"] == f'Package revision health is "False" with message: {refused["revision"]}'
    first_provider = f"{PROVIDER_REGISTRY}/{PROVIDERS[0][0]}"
    assert refused["lock"].startswith(
        "Error occurred during dependency resolution cannot find dependency version to install: cannot fetch "
        f"dependency package tags: cannot list tags for {first_provider}: "
    ), refused["lock"]
    assert refused["xrd"] is None, "the XRD was created before the dependencies resolved"
    assert refused["packages"] == {"Function": [installed.release.function_name], "Provider": []}
    print(f"\nwithout the providers, the ConfigurationRevision: {refused['revision']}\nthe Lock: {refused['lock']}")


def test_the_readme_names_what_crossplane_reports(installed: Installed) -> None:
    section = " ".join(readme.quick_start().split())
    assert missing_providers_message() in section
    first_provider = f"{PROVIDER_REGISTRY}/{PROVIDERS[0][0]}"
    lock = installed.before_mirror["lock"]
    said = lock[lock.index("cannot find dependency version") : lock.index(first_provider) + len(first_provider)]
    assert f"`{said}: ...`" in section, said


def test_the_function_is_installed_from_the_registry_under_the_name_the_composition_calls(installed: Installed) -> None:
    cp, published = installed.cp, installed.release
    name = published.function_name
    assert name == "acme-platform-function-cluster-plugin" == published.source.function_name
    function = cp.kube.get(PKG, "Function", name)
    assert function is not None
    reference = published.artifact("Function")["reference"]
    assert function["spec"]["package"] == reference
    assert function["status"]["resolvedPackage"] == reference
    (revision,) = cp.kube.list(PKG, "FunctionRevision", labels={PARENT_PACKAGE_LABEL: name})
    # Named after the digest of the manifest Crossplane pulled: the one release.json computed.
    digest = published.artifact("Function")["digest"]
    assert revision["metadata"]["name"] == revision_name(name, digest, function["metadata"]["generation"])
    assert condition(revision, "RevisionHealthy")["status"] == "True"
    composition = installed.composite.composition
    assert [s["functionRef"]["name"] for s in composition["spec"]["pipeline"]] == [name]
    lock = cp.kube.get("pkg.crossplane.io/v1beta1", "Lock", "lock")
    (entry,) = [p for p in lock["packages"] if p["name"] == revision["metadata"]["name"]]
    assert (entry["source"], entry["version"]) == (published.source.function_package, published.source.tag)


def test_the_input_crd_is_in_the_package_and_crossplane_does_not_install_it(installed: Installed) -> None:
    """The xpkg spec: a function package may carry CRDs (ours: the step Input's), Crossplane
    parses and lints them and installs none (revision/reconciler.go, the filtering
    establisher). The step input is checked by the function, not by the API server."""
    cp, published = installed.cp, installed.release
    (packaged,) = [o for o in published.xpkg("Function").objects if o["kind"] == "CustomResourceDefinition"]
    assert packaged["metadata"]["name"] == f"inputs.{apigen.INPUT_GROUP}"
    (revision,) = cp.kube.list(PKG, "FunctionRevision", labels={PARENT_PACKAGE_LABEL: published.function_name})
    assert condition(revision, "RevisionHealthy")["status"] == "True"
    assert revision["status"]["capabilities"] == ["composition"]
    assert cp.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", packaged["metadata"]["name"]) is None


def test_the_package_crossplane_pulled_carries_the_image_make_release_embedded(installed: Installed) -> None:
    cp, published = installed.cp, installed.release
    (revision,) = cp.kube.list(PKG, "FunctionRevision", labels={PARENT_PACKAGE_LABEL: published.function_name})
    # The Deployment runtime's container image: the revision's resolved package
    # (runtime_function.go, Post), which no ImageConfig rewrote here.
    image = revision["status"]["resolvedImage"]
    assert image == published.artifact("Function")["reference"]
    repository, tag = published.repository("Function")
    manifest = published.registry.manifest(repository, tag)
    assert manifest.digest == published.artifact("Function")["digest"]
    built = release.read_oci_image(published.folder / published.artifact("image")["file"])
    # Every layer but the one crossplane xpkg build adds for package.yaml is the image's.
    runtime_layers = [
        layer["digest"]
        for layer in manifest.json["layers"]
        if layer.get("annotations", {}).get(release.XPKG_ANNOTATION) != release.XPKG_BASE
    ]
    assert runtime_layers == built["layers"]
    assert len(runtime_layers) == len(manifest.json["layers"]) - 1
    config = json.loads(published.registry.blob(repository, manifest.json["config"]["digest"]))
    for name in release.RUNTIME_FIELDS:
        assert config["config"].get(name) == built["config"]["config"].get(name), name


def test_the_xrd_and_composition_come_from_the_configuration_package(installed: Installed) -> None:
    quick_start = installed.quick_start
    revision = quick_start.configuration_revision()
    assert revision["status"]["foundDependencies"] == revision["status"]["installedDependencies"] == 1 + len(PROVIDERS)
    quick_start.assert_api_from_package(installed.composite.composition)


def test_every_package_is_installed_and_healthy(installed: Installed) -> None:
    """What `kubectl get configuration,function,provider` shows (the README's check)."""
    cp = installed.cp
    _, kinds = readme.install_commands()
    assert kinds == ["configuration", "function", "provider"]
    names = {
        "Configuration": [installed.quick_start.configuration_name],
        "Function": [installed.release.function_name],
        "Provider": sorted(PROVIDER_NAMES),
    }
    for kind, expected in names.items():
        got = cp.kube.list(PKG, kind)
        assert sorted(o["metadata"]["name"] for o in got) == expected
        for obj in got:
            for typ in ("Installed", "Healthy"):
                assert condition(obj, typ).get("status") == "True", (kind, obj["metadata"]["name"], typ, condition(obj, typ))
    mirror = installed.mirror
    rewritten = mirror["spec"]["rewriteImage"]["prefix"]
    assert rewritten.startswith(f"{installed.release.registry.host}/")
    for provider in cp.kube.list(PKG, "Provider"):
        # Installed under its original source, fetched from the mirror.
        package = provider["spec"]["package"]
        assert package.startswith(f"{PROVIDER_REGISTRY}/")
        assert provider["status"]["resolvedPackage"] == rewritten + package.removeprefix(PROVIDER_REGISTRY)
        assert provider["status"]["appliedImageConfigRefs"] == [{"name": mirror["metadata"]["name"], "reason": "RewriteImage"}]


def test_an_xr_composed_through_the_installed_function_converges(installed: Installed) -> None:
    assert_converged_like_the_world(installed.composite)
