"""Fixtures of the end-to-end tests: upstream tools built from the Go module proxy, the function served.

A tool that cannot be built fails the test that needs it, with the reason: the run never
skips and never falls back to anything but the pinned build (scripts/tools.py).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.registry import LocalRegistry, PublishedRelease, publish, push_stub_providers
from tests.strategies import serve

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "scripts" / "tools.py"


def _tools(command: str, name: str) -> Path:
    done = subprocess.run(
        [sys.executable, str(TOOLS), command, name], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/tools.py {command} {name} failed:\n{done.stderr}", pytrace=False)
    return Path(done.stdout.strip())


def tool_path(name: str) -> Path:
    """The executable of a pinned tool, built into the cache if missing; fails the test if it can't be."""
    return _tools("path", name)


def tool_source(name: str) -> Path:
    """The directory of a pinned tool's module (Crossplane's CRDs ship there)."""
    return _tools("source", name)


@pytest.fixture(scope="session")
def crossplane() -> Path:
    """The Crossplane CLI (github.com/crossplane/cli)."""
    return tool_path("crossplane")


@pytest.fixture(scope="session")
def crossplane_core() -> Path:
    """Crossplane core: `crossplane render --crossplane-binary` runs its `internal render`."""
    return tool_path("crossplane-core")


@pytest.fixture(scope="session")
def crank_1() -> Path:
    """The Crossplane 1.x CLI (cmd/crank of github.com/crossplane/crossplane v1.20)."""
    return tool_path("crank-1")


@pytest.fixture(scope="session")
def function_address() -> Iterator[str]:
    """`function-cluster-plugin serve --insecure` on loopback, as the Development runtime dials it."""
    with serve("--insecure") as served:
        yield served.address
        assert served.alive(), f"the function server died:\n{served.log()}"


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    """Debian's docker-registry on loopback, TLS from a test CA (e2e/registry.py)."""
    with LocalRegistry.start(tmp_path_factory.mktemp("registry")) as running:
        yield running


# A registry path of another organisation than the project's: the Function's name
# (acme-platform-function-cluster-plugin) must have been computed for it.
RELEASE_PATH = "acme/platform"


@pytest.fixture(scope="session")
def published_release(
    registry: LocalRegistry, crossplane: Path, tmp_path_factory: pytest.TempPathFactory
) -> PublishedRelease:
    """The checkout's release (make release) for ``registry``/acme/platform, pushed (make release-push)."""
    return publish(registry, crossplane, tmp_path_factory.mktemp("dist"), RELEASE_PATH)


@pytest.fixture(scope="session")
def provider_mirror(
    registry: LocalRegistry, crossplane: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, object]:
    """Stand-ins for the providers in ``registry``, and the ImageConfig that mirrors them there."""
    return push_stub_providers(registry, crossplane, tmp_path_factory.mktemp("providers"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The fault table (e2e/faults/report.py), when fault cases ran."""
    from e2e.faults.report import ROWS, table

    if ROWS:
        terminalreporter.write_sep("=", "faults: time to recover")
        terminalreporter.write_line(table(ROWS))
