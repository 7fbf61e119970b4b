"""The fault suite's own control plane (its parts are crashed and restarted: no other module
shares it), the played providers and the project's API on it.

Logs of every process stay under pytest's temporary directory; a failing test gets the end of
each log in its report.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.aws.deletion import DeletionWatch
from e2e.controlplane.conftest import pytest_runtest_makereport, running_control_plane
from e2e.controlplane.harness import ControlPlane
from e2e.faults.control import Parts

__all__ = ["pytest_runtest_makereport"]  # the logs of the control plane in a failing test's report


@pytest.fixture(scope="package")
def fault_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with running_control_plane(tmp_path_factory.mktemp("faults")) as cp:
        yield cp


@pytest.fixture(scope="package")
def parts(fault_control_plane: ControlPlane) -> Parts:
    return Parts(fault_control_plane)


@pytest.fixture(scope="module")
def played(fault_control_plane: ControlPlane) -> Iterator[DeletionWatch]:
    """The played providers (Releases too), recording when each object was marked for
    deletion and any deletion the usage webhook refused."""
    watch = DeletionWatch(fault_control_plane.kube, namespaced=True)
    watch.start()
    yield watch
    watch.stop()


@pytest.fixture(scope="module")
def played_api(fault_control_plane: ControlPlane, played: DeletionWatch) -> Iterator[dict]:
    """apis/v2 for one module (its XRs removed after it, while the played providers run)."""
    composition = fault_control_plane.install_api("v2")
    yield composition
    fault_control_plane.remove_api("v2")
