#!/usr/bin/env python3
"""Vendor the CRDs and Helm chart schemas the test suite validates against.

Copies, byte for byte, from a shared source tree (default: ``../shared`` relative
to the repository root) into ``tests/fixtures/``:

* every CRD ``*.yaml`` under ``<shared>/crds/<project>/`` (the ``crossplane-proto``
  folder is skipped: it holds protobuf sources, not CRDs) plus ``crds/PROVENANCE.md``;
* ``values.schema.json`` and ``Chart.yaml`` of the charts that ship a values schema,
  plus ``charts/PROVENANCE.md``.

The copy is idempotent: files whose bytes already match are left alone, and
vendored files that no longer exist upstream are reported (use ``--prune`` to
delete them). Re-run it after refreshing ``shared/`` on an upgrade.

Usage::

    python scripts/vendor_fixtures.py [--shared PATH] [--prune] [--check]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SHARED = REPO_ROOT.parent / "shared"
FIXTURES = REPO_ROOT / "tests" / "fixtures"

# Folders under shared/crds/ that do not hold CRDs.
SKIP_CRD_DIRS = frozenset({"crossplane-proto"})
# Charts whose values.schema.json the tests validate against.
SCHEMA_CHARTS = (
    "aws-ebs-csi-driver",
    "amazon-eks-pod-identity-webhook",
    "cert-manager",
)
CHART_FILES = ("values.schema.json", "Chart.yaml")


def planned_copies(shared: Path) -> list[tuple[Path, Path]]:
    """Return the (source, destination) pairs to vendor from ``shared``.

    Args:
        shared: The shared source tree (holding ``crds/`` and ``charts/``).

    Returns:
        The list of file copies to perform, sorted by destination.

    Raises:
        FileNotFoundError: If an expected source file or folder is missing.
    """
    crds = shared / "crds"
    charts = shared / "charts"
    pairs: list[tuple[Path, Path]] = [
        (crds / "PROVENANCE.md", FIXTURES / "crds" / "PROVENANCE.md"),
        (charts / "PROVENANCE.md", FIXTURES / "charts" / "PROVENANCE.md"),
    ]
    for project in sorted(p for p in crds.iterdir() if p.is_dir()):
        if project.name in SKIP_CRD_DIRS:
            continue
        pairs.extend(
            (crd, FIXTURES / "crds" / project.name / crd.name)
            for crd in sorted(project.glob("*.yaml"))
        )
    for chart in SCHEMA_CHARTS:
        pairs.extend(
            (charts / chart / name, FIXTURES / "charts" / chart / name)
            for name in CHART_FILES
        )
    missing = [str(src) for src, _ in pairs if not src.is_file()]
    if missing:
        msg = "missing source files: " + ", ".join(missing)
        raise FileNotFoundError(msg)
    return sorted(pairs, key=lambda pair: pair[1])


def stale_files(pairs: list[tuple[Path, Path]]) -> list[Path]:
    """Return vendored CRD/chart files that are not part of ``pairs`` any more.

    Args:
        pairs: The planned copies, as returned by :func:`planned_copies`.

    Returns:
        Files under ``tests/fixtures/{crds,charts}`` that have no source any more.
    """
    wanted = {dst for _, dst in pairs}
    existing = [
        path
        for sub in ("crds", "charts")
        if (FIXTURES / sub).is_dir()
        for path in (FIXTURES / sub).rglob("*")
        if path.is_file()
    ]
    return sorted(path for path in existing if path not in wanted)


def report(message: str) -> None:
    """Write one line of progress to stdout.

    Args:
        message: The line to write.
    """
    sys.stdout.write(message + "\n")


def same_bytes(src: Path, dst: Path) -> bool:
    """Return whether ``dst`` exists and holds exactly the bytes of ``src``.

    Args:
        src: The source file.
        dst: The destination file.

    Returns:
        True when both files are byte-for-byte identical.
    """
    return dst.is_file() and dst.read_bytes() == src.read_bytes()


def vendor(shared: Path, *, prune: bool = False, check: bool = False) -> int:
    """Copy the fixtures from ``shared`` into ``tests/fixtures``.

    Args:
        shared: The shared source tree.
        prune: Delete vendored files that no longer exist upstream.
        check: Change nothing; only report whether the fixtures are up to date.

    Returns:
        A process exit code: 0 when done (or up to date with ``check``), 1 otherwise.
    """
    pairs = planned_copies(shared)
    changed = [(src, dst) for src, dst in pairs if not same_bytes(src, dst)]
    stale = stale_files(pairs)
    for src, dst in changed:
        rel = dst.relative_to(REPO_ROOT)
        if check:
            report(f"out of date: {rel}")
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        report(f"copied {src} -> {rel}")
    for path in stale:
        rel = path.relative_to(REPO_ROOT)
        if prune and not check:
            path.unlink()
            report(f"removed stale {rel}")
        else:
            report(f"stale (not upstream any more): {rel}")
    report(f"{len(pairs)} files vendored, {len(changed)} changed, {len(stale)} stale")
    if check and (changed or stale):
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run :func:`vendor`.

    Args:
        argv: Command-line arguments (default: ``sys.argv[1:]``).

    Returns:
        The process exit code.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shared",
        type=Path,
        default=DEFAULT_SHARED,
        help=f"shared source tree (default: {DEFAULT_SHARED})",
    )
    parser.add_argument(
        "--prune", action="store_true", help="delete stale vendored files"
    )
    parser.add_argument("--check", action="store_true", help="only report differences")
    args = parser.parse_args(argv)
    return vendor(args.shared.resolve(), prune=args.prune, check=args.check)


if __name__ == "__main__":
    sys.exit(main())
