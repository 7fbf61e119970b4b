#!/usr/bin/env python3
"""Vendor the CRDs and packaged Helm charts the test suite validates and renders with.

Copies, byte for byte, from a shared source tree (default: ``../shared`` relative
to the repository root) into ``tests/fixtures/``:

* every CRD ``*.yaml`` under ``<shared>/crds/<project>/`` (the ``crossplane-proto``
  folder is skipped: it holds protobuf sources, not CRDs) plus ``crds/PROVENANCE.md``;
* every packaged chart ``<shared>/charts-src/*.tgz`` (what the Releases install,
  rendered by ``tests/test_helm.py``; their ``values.schema.json`` is what
  ``tests/kube_schema.validate_values`` reads) plus its ``PROVENANCE.md``, into
  ``charts/``, and writes ``charts/SHA256SUMS`` (``sha256sum`` format) for them.

The copy is idempotent: files whose bytes already match are left alone, and
vendored files that no longer exist upstream are reported (use ``--prune`` to
delete them). Re-run it after refreshing ``shared/`` on an upgrade.

``tests/fixtures/older-charts/`` (older chart versions packaged from upstream, not
from ``shared/``) is not copied: each run checks that its ``SHA256SUMS`` lists
exactly its packages with their digests and that its ``PROVENANCE.md`` names each.

Usage::

    python scripts/vendor_fixtures.py [--shared PATH] [--prune] [--check]

``make vendor-check`` runs ``--check`` (CI does, where ``../shared`` is beside the
checkout); ``make test`` does not need ``../shared``.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SHARED = REPO_ROOT.parent / "shared"
FIXTURES = REPO_ROOT / "tests" / "fixtures"

# Folders under shared/crds/ that do not hold CRDs.
SKIP_CRD_DIRS = frozenset({"crossplane-proto"})
# The checksum list written beside the vendored chart packages.
CHECKSUMS = "SHA256SUMS"
# Older chart versions packaged from upstream with their own provenance (not in shared/).
OLDER_CHARTS = "older-charts"


def planned_copies(shared: Path, fixtures: Path = FIXTURES) -> list[tuple[Path, Path]]:
    """Return the (source, destination) pairs to vendor from ``shared``.

    Args:
        shared: The shared source tree (holding ``crds/`` and ``charts-src/``).
        fixtures: The fixtures folder to vendor into.

    Returns:
        The list of file copies to perform, sorted by destination.

    Raises:
        FileNotFoundError: If an expected source file or folder is missing.
    """
    crds = shared / "crds"
    charts = shared / "charts-src"
    pairs: list[tuple[Path, Path]] = [
        (crds / "PROVENANCE.md", fixtures / "crds" / "PROVENANCE.md"),
        (charts / "PROVENANCE.md", fixtures / "charts" / "PROVENANCE.md"),
    ]
    for project in sorted(p for p in crds.iterdir() if p.is_dir()):
        if project.name in SKIP_CRD_DIRS:
            continue
        pairs.extend(
            (crd, fixtures / "crds" / project.name / crd.name)
            for crd in sorted(project.glob("*.yaml"))
        )
    packages = sorted(charts.glob("*.tgz"))
    if not packages:
        msg = f"no packaged charts (*.tgz) in {charts}"
        raise FileNotFoundError(msg)
    pairs.extend((tgz, fixtures / "charts" / tgz.name) for tgz in packages)
    missing = [str(src) for src, _ in pairs if not src.is_file()]
    if missing:
        msg = "missing source files: " + ", ".join(missing)
        raise FileNotFoundError(msg)
    return sorted(pairs, key=lambda pair: pair[1])


def stale_files(pairs: list[tuple[Path, Path]], fixtures: Path = FIXTURES) -> list[Path]:
    """Return vendored CRD/chart files that are not part of ``pairs`` any more.

    Args:
        pairs: The planned copies, as returned by :func:`planned_copies`.
        fixtures: The fixtures folder.

    Returns:
        Files under ``<fixtures>/{crds,charts}`` that have no source any more.
    """
    wanted = {dst for _, dst in pairs} | {fixtures / "charts" / CHECKSUMS}
    existing = [
        path
        for sub in ("crds", "charts")
        if (fixtures / sub).is_dir()
        for path in (fixtures / sub).rglob("*")
        if path.is_file()
    ]
    return sorted(path for path in existing if path not in wanted)


def shown(path: Path) -> str:
    """Return ``path`` relative to the repository when it is inside it.

    Args:
        path: A file path.

    Returns:
        The path to print.
    """
    return str(path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path)


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


def checksums(pairs: list[tuple[Path, Path]]) -> str:
    """Return the ``SHA256SUMS`` text for the chart packages among ``pairs``.

    Args:
        pairs: The planned copies, as returned by :func:`planned_copies`.

    Returns:
        One ``<sha256>  <file name>`` line per ``.tgz``, sorted by name (``sha256sum -c``
        reads it from inside ``tests/fixtures/charts``).
    """
    lines = [
        f"{hashlib.sha256(src.read_bytes()).hexdigest()}  {dst.name}\n"
        for src, dst in pairs
        if dst.suffix == ".tgz"
    ]
    return "".join(sorted(lines, key=lambda line: line.split()[1]))


def older_chart_problems(fixtures: Path = FIXTURES) -> list[str]:
    """What is wrong with ``<fixtures>/older-charts``: packages and checksums that disagree.

    Args:
        fixtures: The fixtures folder.

    Returns:
        One line per problem: a package missing from ``SHA256SUMS`` or ``PROVENANCE.md``,
        a listed one that is gone, a digest that differs. Empty without the folder.
    """
    folder = fixtures / OLDER_CHARTS
    if not folder.is_dir():
        return []
    sums_file, provenance_file = folder / CHECKSUMS, folder / "PROVENANCE.md"
    if not sums_file.is_file() or not provenance_file.is_file():
        return [f"{shown(folder)}: needs {CHECKSUMS} and PROVENANCE.md"]
    recorded = {}
    for line in sums_file.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        recorded[name] = digest
    provenance = provenance_file.read_text(encoding="utf-8")
    packages = {p.name: p for p in folder.glob("*.tgz")}
    problems = [
        f"{shown(folder / name)}: in {CHECKSUMS}, no such package"
        for name in sorted(set(recorded) - set(packages))
    ]
    for name, path in sorted(packages.items()):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if name not in recorded:
            problems.append(f"{shown(path)}: not in {CHECKSUMS}")
        elif recorded[name] != digest:
            problems.append(f"{shown(path)}: sha256 {digest}, {CHECKSUMS} says {recorded[name]}")
        if f"| {name} |" not in provenance:
            problems.append(f"{shown(path)}: not in PROVENANCE.md")
    return problems


def vendor(
    shared: Path, *, fixtures: Path = FIXTURES, prune: bool = False, check: bool = False
) -> int:
    """Copy the fixtures from ``shared`` into ``fixtures`` (default ``tests/fixtures``).

    Args:
        shared: The shared source tree.
        fixtures: The fixtures folder to vendor into.
        prune: Delete vendored files that no longer exist upstream.
        check: Change nothing; only report whether the fixtures are up to date.

    Returns:
        A process exit code: 0 when done (or up to date with ``check``), 1 otherwise.
    """
    pairs = planned_copies(shared, fixtures)
    changed = [(src, dst) for src, dst in pairs if not same_bytes(src, dst)]
    stale = stale_files(pairs, fixtures)
    for src, dst in changed:
        rel = shown(dst)
        if check:
            report(f"out of date: {rel}")
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        report(f"copied {src} -> {rel}")
    sums = checksums(pairs)
    sums_file = fixtures / "charts" / CHECKSUMS
    sums_changed = not sums_file.is_file() or sums_file.read_text(encoding="utf-8") != sums
    if sums_changed:
        if check:
            report(f"out of date: {shown(sums_file)}")
        else:
            sums_file.write_text(sums, encoding="utf-8")
            report(f"wrote {shown(sums_file)}")
    for path in stale:
        rel = shown(path)
        if prune and not check:
            path.unlink()
            if not any(path.parent.iterdir()):
                path.parent.rmdir()
            report(f"removed stale {rel}")
        else:
            report(f"stale (not upstream any more): {rel}")
    older = older_chart_problems(fixtures)
    for problem in older:
        report(f"older chart: {problem}")
    report(f"{len(pairs)} files vendored, {len(changed)} changed, {len(stale)} stale")
    if older or (check and (changed or stale or sums_changed)):
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
    if not (args.shared / "crds").is_dir():
        # ../shared exists only where the project is developed (and in CI): a clone has
        # its copies already, so say what is missing instead of a traceback.
        sys.stderr.write(
            f"FATAL: no shared source tree at {args.shared} (it needs crds/ and charts-src/);"
            " give its path with --shared\n"
        )
        return 2
    return vendor(args.shared.resolve(), prune=args.prune, check=args.check)


if __name__ == "__main__":
    sys.exit(main())
