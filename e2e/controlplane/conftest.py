"""The real control planes, each stopped always: one per session with the function installed
from the package cache (the project's API tests), and one per install module
(``install_control_plane``: the release's packages from the test registry).

Logs of every process stay under pytest's temporary directory (printed at start); a test
that fails gets the end of each log in its report. Start-up time of each step is printed
in the terminal summary.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import tool_path
from e2e.controlplane.driver import Providers
from e2e.controlplane.harness import ROOT, ControlPlane, StartError
from e2e.controlplane.processes import Process
from e2e.controlplane.workload import ChartServer, provider_helm
from e2e.registry import LocalRegistry

# Every control plane started (for the start-up summary), and those not yet stopped (for
# the logs of a failing test).
_RUNNING: list[ControlPlane] = []
_ACTIVE: list[ControlPlane] = []


@contextmanager
def running_control_plane(root: Path, kind: type[ControlPlane] = ControlPlane, **options: Any) -> Iterator[ControlPlane]:
    """A control plane (of class ``kind``) started under ``root`` (``options``: its
    constructor's), stopped after."""
    print(f"\n{kind.__name__} logs: {root / 'logs'}")
    cp = kind(root, tool_path, **options)
    _RUNNING.append(cp)
    try:
        cp.start()
    except (StartError, TimeoutError) as err:
        report = cp.log_report()
        cp.stop()
        pytest.fail(f"the {kind.__name__} did not start: {err}\n{report}", pytrace=False)
    _ACTIVE.append(cp)
    try:
        yield cp
    finally:
        _ACTIVE.remove(cp)
        cp.stop()


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The function installed from the package cache; the project's API installed per module."""
    with running_control_plane(tmp_path_factory.mktemp("controlplane")) as cp:
        yield cp


@pytest.fixture(scope="module")
def install_control_plane(registry: LocalRegistry, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of its own for a module that installs the release's packages: no
    Function yet, and Crossplane trusts the test registry's CA as the Helm chart's
    ``registryCaBundleConfig`` makes it (``CA_BUNDLE_PATH``, i.e. ``--ca-bundle-path``)."""
    options = {"crossplane_args": [f"--ca-bundle-path={registry.ca_file}"], "function_package": False}
    with running_control_plane(tmp_path_factory.mktemp("install"), **options) as cp:
        yield cp


# The providers outlive the API: removing an XRD deletes its XRs, whose composed resources
# need the (played) providers to let them go.
@pytest.fixture(scope="module")
def namespaced_api(control_plane: ControlPlane, namespaced_providers: Providers) -> Iterator[dict]:
    """apis/v2 installed (Crossplane v2 namespaced ClusterPlugin); removed after the module."""
    composition = control_plane.install_api("v2")
    yield composition
    control_plane.remove_api("v2")


@pytest.fixture(scope="module")
def legacy_api(control_plane: ControlPlane, legacy_providers: Providers) -> Iterator[dict]:
    """apis/v1 installed (legacy XClusterPlugin with claim ClusterPlugin) with the legacy example's
    own Composition beside it, which its claim selects (its CAPI objects are v1beta1); that
    Composition. Both removed after the module, once every claim and XR is gone."""
    control_plane.install_api("v1")
    own = control_plane.install_composition(ROOT / "examples" / "calico-legacy-claim" / "composition.yaml")
    yield own
    control_plane.remove_api("v1")
    control_plane.kube.delete(own["apiVersion"], "Composition", own["metadata"]["name"])


def _providers(control_plane: ControlPlane, *, namespaced: bool) -> Iterator[Providers]:
    providers = Providers(control_plane.kube, namespaced=namespaced)
    providers.start()
    try:
        yield providers
    finally:
        providers.stop()


@pytest.fixture(scope="module")
def namespaced_providers(control_plane: ControlPlane) -> Iterator[Providers]:
    yield from _providers(control_plane, namespaced=True)


@pytest.fixture(scope="module")
def legacy_providers(control_plane: ControlPlane) -> Iterator[Providers]:
    yield from _providers(control_plane, namespaced=False)


# --- real helm: the chart server, provider-helm out of cluster, the played AWS provider ----------
# (module-scoped: each module that installs real charts gets its own; test_helm_kwok.py and
# test_fleet_rollout.py use them)


@pytest.fixture(scope="module")
def chart_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChartServer]:
    server = ChartServer(tmp_path_factory.mktemp("charts"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def real_provider_helm(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    try:
        process = provider_helm(control_plane, tmp_path_factory.mktemp("provider-helm"))
    except (StartError, TimeoutError) as err:
        pytest.fail(f"provider-helm did not start: {err}", pytrace=False)
    yield process
    process.stop()
    del control_plane.processes[process.name]  # stopped on purpose: not a process that died


@pytest.fixture(scope="module")
def helm_providers(control_plane: ControlPlane, real_provider_helm: Process) -> Iterator[Providers]:
    """The played AWS provider; Releases are provider-helm's."""
    providers = Providers(control_plane.kube, namespaced=True, real_kinds=frozenset({"Release"}))
    providers.start()
    yield providers
    providers.stop()



@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    uses_one = any(name.endswith("control_plane") for name in getattr(item, "fixturenames", ()))
    if not (report.failed and uses_one):
        return
    for cp in _ACTIVE:
        dead = cp.dead()
        if dead:
            report.sections.append((f"processes that died ({cp.root.name})", "\n\n".join(dead)))
        report.sections.append((f"control plane logs ({cp.logs})", cp.log_report()))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for cp in _RUNNING:
        steps = ", ".join(f"{k} {v:.1f}s" for k, v in cp.timings.steps.items())
        terminalreporter.write_line(f"control plane {cp.root.name} start-up {cp.timings.total:.1f}s: {steps}")


