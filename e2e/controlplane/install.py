"""The README's install checklist, carried out on a real control plane with a published release.

The release (``make release`` and ``make release-push``: the ``published_release``
fixture) is in a registry on loopback whose CA Crossplane trusts; each step below is the
README's, with its files and snippets read from the release folder, the README and docs/installing.md:

- ``kubectl apply -f`` of the flavour's folder the install step names, from the release's
  ``install/`` folder: the ClusterRole and the flavour's Configuration (server-side apply
  of the same objects; no kubectl is built here);
- the ``ImageConfig`` mirror of docs/installing.md, pointed at the registry's stand-in providers;
- the AWS provider config of step 4 (``install/<flavour>/provider-config/``).

Crossplane's package manager does the rest. With ``--package-runtime=External`` nothing
runs a package's image: :meth:`ControlPlane.play_function_runtime` points the Function's
revision at the function this control plane serves (the checkout's, with mTLS), and
:meth:`ControlPlane.play_provider_runtime` reports each stand-in provider's runtime
healthy, as the driver plays its controller.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.controlplane.composite import conditions
from e2e.controlplane.harness import ROOT, ControlPlane, friendly_id
from e2e.registry import PublishedRelease
from function.flavour import NAMESPACED_XR, XRType
from function_tools import apigen
from function_tools.packaging import PROVIDER_REGISTRY, PROVIDERS, object_name
from scripts import release
from tests import readme

PKG = "pkg.crossplane.io/v1"
# Crossplane installs a provider dependency under the name of its repository path.
PROVIDER_NAMES = [object_name(f"{PROVIDER_REGISTRY}/{name}") for name, _ in PROVIDERS]


def condition(obj: dict[str, Any] | None, typ: str) -> dict[str, Any]:
    """The condition ``typ`` of ``obj`` ({} when it has none)."""
    return conditions(obj).get(typ, {})


def revision_name(package: str, digest: str, generation: int) -> str:
    """The revision Crossplane makes of the package object ``package`` for an image of
    manifest ``digest`` (manager/reconciler.go: FriendlyID of the package's name and the
    sha256 of "<digest hex>|<generation>")."""
    revision_id = hashlib.sha256(f"{digest.partition(':')[2]}|{generation}".encode()).hexdigest()
    return friendly_id(package, revision_id)


def legacy_example_composition(package_composition: dict[str, Any]) -> dict[str, Any]:
    """examples/calico-legacy-claim/composition.yaml (its cluster's CAPI serves only v1beta1)
    calling the Function the package's Composition calls (the example names the default
    registry's), as docs/input.md's table says to apply it beside the package's."""
    composition = yaml.safe_load((ROOT / "examples" / "calico-legacy-claim" / "composition.yaml").read_text())
    (function,) = {s["functionRef"]["name"] for s in package_composition["spec"]["pipeline"]}
    for step in composition["spec"]["pipeline"]:
        step["functionRef"]["name"] = function
    return composition


def missing_providers_message() -> str:
    """What the ConfigurationRevision reports while the function is installed and no
    provider is (revision/dependency.go: the missing sorted, three named, the rest counted)."""
    missing = sorted(f'"{PROVIDER_REGISTRY}/{name}" ({version})' for name, version in PROVIDERS)
    shown = ", ".join(missing[:3])
    rest = f", and {len(missing) - 3} more" if len(missing) > 3 else ""
    return f"cannot resolve package dependencies: missing dependencies: {shown}{rest}"


@dataclass
class QuickStart:
    """The quick start for one flavour of a published release, on ``cp``."""

    cp: ControlPlane
    release: PublishedRelease
    xr: XRType

    @property
    def kube(self):
        return self.cp.kube

    @property
    def install(self) -> Path:
        return self.release.folder / "install"

    @property
    def flavour(self) -> str:
        """The release's name of the flavour (its apis/ folder)."""
        return apigen.package_folder(self.xr).name

    @property
    def configuration_name(self) -> str:
        (meta,) = [o for o in self.release.xpkg("Configuration", self.flavour).objects if o["kind"] == "Configuration"]
        return str(meta["metadata"]["name"])

    def documents(self, file: str) -> list[dict[str, Any]]:
        return [d for d in yaml.safe_load_all((self.install / file).read_text()) if d]

    def files(self) -> list[str]:
        """What the checklist's install step applies for this flavour, in its order: each
        folder's *.yaml files, as ``kubectl apply -f FOLDER/`` reads them (not recursively).
        The README applies ``install/namespaced/``, and ``install/legacy/`` instead for the
        legacy flavour; the provider config (``provider-config/``) comes later, once the
        Configuration is healthy (:meth:`provider_config`)."""
        applied, _ = readme.install_commands()
        folder = release.flavour_folder(self.xr)
        out: list[str] = []
        for named in applied:
            if release.PROVIDER_CONFIG_FOLDER in named.split("/"):
                continue
            entry = named.replace(release.flavour_folder(NAMESPACED_XR), folder, 1)
            path = self.install / entry
            if path.is_dir():
                out += sorted(str(p.relative_to(self.install)) for p in path.glob("*.yaml"))
            else:
                out.append(entry)
        return out

    def apply(self, edit: Callable[[dict[str, Any]], None] | None = None) -> None:
        """``kubectl apply -f`` of each file, ``edit`` first applied to its Configuration."""
        for file in self.files():
            for doc in self.documents(file):
                if edit is not None and doc["kind"] == "Configuration":
                    edit(doc)
                self.kube.apply(doc)

    def mirror(self, provider_mirror: dict[str, Any]) -> dict[str, Any]:
        """The ImageConfig of docs/installing.md, rewriting to where the stand-in providers are."""
        (image_config,) = [d for d in readme.yaml_blocks(readme.quick_start()) if d.get("kind") == "ImageConfig"]
        image_config = copy.deepcopy(image_config)
        image_config["spec"]["rewriteImage"]["prefix"] = provider_mirror["spec"]["rewriteImage"]["prefix"]
        return image_config

    def provider_config(self) -> dict[str, Any]:
        """Step 4's AWS provider config of this flavour, from the release's install folder."""
        path = self.install / release.flavour_folder(self.xr) / release.PROVIDER_CONFIG_FOLDER / "provider-config.yaml"
        (config,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
        return config

    # --- what Crossplane did -------------------------------------------------------------------

    def configuration_revision(self) -> dict[str, Any]:
        return self.cp.package_revision("Configuration", self.configuration_name)

    def xrd(self) -> dict[str, Any] | None:
        return self.kube.get(self.xr.xrd_api_version, "CompositeResourceDefinition", self.xr.xrd_name)

    def assert_api_from_package(self, composition: dict[str, Any]) -> dict[str, Any]:
        """The XRD (returned) and ``composition`` as the API server holds them are the
        Configuration package's, controlled by its revision, the XRD established (and
        offering the claim)."""
        revision = self.configuration_revision()
        # The ClusterPlugin's XRD and Composition, beside the ClusterPluginRollout's in the package.
        packaged = {
            o["kind"]: o
            for o in self.release.xpkg("Configuration", self.flavour).objects
            if o["metadata"]["name"] == self.xr.xrd_name
        }
        xrd = self.xrd()
        assert xrd is not None
        for obj in (xrd, composition):
            controllers = [(r["kind"], r["name"]) for r in obj["metadata"]["ownerReferences"] if r.get("controller")]
            assert controllers == [("ConfigurationRevision", revision["metadata"]["name"])], obj["metadata"]
        for typ in ["Established"] + ([] if self.xr.namespaced else ["Offered"]):
            assert condition(xrd, typ).get("status") == "True", conditions(xrd)
        assert composition["spec"]["pipeline"] == packaged["Composition"]["spec"]["pipeline"]
        schemas = [v["schema"] for v in packaged["CompositeResourceDefinition"]["spec"]["versions"]]
        assert [v["schema"] for v in xrd["spec"]["versions"]] == schemas
        return xrd

    def wait_api(self, timeout_s: float = 60) -> dict[str, Any]:
        """Until the package's XRD is established (and offers its claim) and its Composition
        is there; the Composition as the API server holds it."""

        def established() -> bool:
            got = self.xrd()
            wanted = ["Established"] + (["Offered"] if not self.xr.namespaced else [])
            return all(condition(got, t).get("status") == "True" for t in wanted)

        self.kube.wait_for(established, f"XRD {self.xr.xrd_name} established", timeout_s=timeout_s)
        self.kube.kind(self.xr.api_version, self.xr.kind)
        return self.kube.wait_for(
            lambda: self.kube.get("apiextensions.crossplane.io/v1", "Composition", self.xr.xrd_name),
            f"Composition {self.xr.xrd_name}",
            timeout_s=timeout_s,
        )
