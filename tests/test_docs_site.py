"""The docs site builds, with broken links and anchors as errors, and that check can fail.

``make docs`` (in ``make test`` and CI) runs ``mkdocs build --strict`` on ``mkdocs.yml``; this
runs the same build into a temporary folder, so ``pytest`` alone holds it too. mkdocs.yml's
``validation`` turns a link to a page that does not exist, an anchor no heading of its page
has, a link out of docs/ and a page the nav leaves out into warnings, and ``strict`` makes a
warning fail the build. A copy of the docs with one broken anchor proves that it does. The
README, outside docs/, links into the pages: each of its anchors is an id of the built page.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "mkdocs.yml"


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = _build(CONFIG, out)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    return out


def test_the_config_makes_every_bad_link_an_error() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    assert config["strict"] is True
    assert config["docs_dir"] == "docs"
    validation = config["validation"]
    for key in ("omitted_files", "absolute_links", "unrecognized_links", "anchors"):
        assert validation[key] == "warn", key
    assert validation["links"] == {"not_found": "warn", "anchors": "warn"}


def test_the_site_builds_strict(site: Path) -> None:
    for page in sorted((ROOT / "docs").glob("*.md")):
        name = "index.html" if page.stem == "index" else f"{page.stem}/index.html"
        assert (site / name).is_file(), name


def _ids(html: str) -> set[str]:
    return set(re.findall(r'\sid="([^"]+)"', html))


def test_the_readmes_links_into_the_site_resolve(site: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(docs/([\w-]+)\.md(?:#([\w-]+))?\)", readme)
    assert links  # guards the search
    problems = []
    for stem, anchor in links:
        built = site / ("index.html" if stem == "index" else f"{stem}/index.html")
        if not built.is_file():
            problems.append(f"docs/{stem}.md")
        elif anchor and anchor not in _ids(built.read_text(encoding="utf-8")):
            problems.append(f"docs/{stem}.md#{anchor}")
    assert problems == []


def _copy(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of docs/ and of mkdocs.yml pointing at it."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    config = yaml.safe_load(CONFIG.read_text())
    config["docs_dir"] = str(docs)
    copy = tmp_path / "mkdocs.yml"
    copy.write_text(yaml.safe_dump(config, sort_keys=False))
    return docs, copy


def test_the_copy_builds_as_the_docs_do(tmp_path: Path) -> None:
    """The copy the failing builds start from builds, so what fails them is what they change."""
    _, config = _copy(tmp_path)
    built = _build(config, tmp_path / "site")
    assert built.returncode == 0, built.stdout + built.stderr


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        pytest.param(
            "](fleet.md#rolling-out-across-a-fleet)",
            "](fleet.md#rolling-out-across-a-fleat)",
            "does not contain an anchor '#rolling-out-across-a-fleat'",
            id="anchor-on-another-page",
        ),
        pytest.param(
            "](fleet.md#rolling-out-across-a-fleet)",
            "](flet.md#rolling-out-across-a-fleet)",
            "'flet.md#rolling-out-across-a-fleet', but the target 'flet.md' is not found",
            id="page",
        ),
        pytest.param(
            "](fleet.md#rolling-out-across-a-fleet)",
            "](../examples/production/function.yaml)",
            "'../examples/production/function.yaml', but the target is not found",
            id="file-outside-docs",
        ),
    ],
)
def test_a_broken_link_fails_the_build_naming_it(
    tmp_path: Path, old: str, new: str, said: str
) -> None:
    docs, config = _copy(tmp_path)
    page = docs / "upgrading.md"
    text = page.read_text(encoding="utf-8")
    assert old in text
    page.write_text(text.replace(old, new, 1), encoding="utf-8")
    built = _build(config, tmp_path / "site")
    assert built.returncode != 0
    output = built.stdout + built.stderr
    assert "Doc file 'upgrading.md'" in output and said in output, output
    assert "Aborted with 1 warnings in strict mode" in output, output


def test_an_anchor_missing_on_its_own_page_fails_the_build(tmp_path: Path) -> None:
    docs, config = _copy(tmp_path)
    page = docs / "operating.md"
    text = page.read_text(encoding="utf-8")
    assert "([Scaling](#scaling))" in text
    page.write_text(text.replace("([Scaling](#scaling))", "([Scaling](#scalling))", 1))
    built = _build(config, tmp_path / "site")
    assert built.returncode != 0
    assert "'#scalling', but there is no such anchor on this page" in built.stderr, built.stderr


def test_a_page_the_nav_leaves_out_fails_the_build(tmp_path: Path) -> None:
    docs, config = _copy(tmp_path)
    (docs / "orphan.md").write_text("# Orphan\n")
    built = _build(config, tmp_path / "site")
    assert built.returncode != 0
    assert "orphan.md" in built.stderr, built.stderr
