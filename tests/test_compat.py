"""The Kubernetes compatibility table (function/data/kubernetes-compatibility.json, function/compat.py).

- It covers every chart a Release of the function installs, keyed by chart name, each with
  the add-on (``Addon.name``) that installs it.
- Every row has one source (a URL, the tag/commit or date it was read at, its words) and says
  how the words became bounds; a missing bound is said to be undocumented, never made up.
- A chart's rows never overlap, so a version has at most one range.
- The defaults per minor are what the rows and the vendored packages give: the newest
  vendored version that supports the minor; every default is vendored.
- The lookups: supported ranges, None for what the table does not know, defaults, and the
  one-line description of a range.
"""

from __future__ import annotations

import itertools
import json
from importlib import resources
from pathlib import Path

import pytest

from function import compat
from function.addons import ccm
from function.compat import MinorRange, Source
from function.registry import ADDONS, PLUGIN_NAMES
from function.step_input import Charts, ChartSource
from tests.kube_schema import CHART_DIR, vendored_charts

DATA = json.loads(
    (Path(resources.files("function.data")) / "kubernetes-compatibility.json").read_text()  # type: ignore[arg-type]
)
MINORS = [(1, m) for m in range(29, 37)]
SOURCE = Source("https://example.com", "ref", "words")


def _key(version: str) -> tuple[int, int, int]:
    a, b, c = version.removeprefix("v").split(".")
    return int(a), int(b), 1 << 31 if c == "x" else int(c)


def test_the_table_covers_every_chart_the_function_installs() -> None:
    names = {info.default.name for info in Charts.model_fields.values() if isinstance(info.default, ChartSource)}
    names.add("eks-pod-identity-agent")  # charts.podIdentityAgent has no default (no Helm repository)
    assert names == set(compat.charts())
    assert len(names) == 11
    for chart in compat.charts():
        assert compat.addon_of(chart) in PLUGIN_NAMES, chart
    # Each add-on with a Release has its chart in the table under its own name.
    for addon in ADDONS:
        if addon.release is not None:
            chart = addon.release.chart(Charts())
            if chart is not None:
                assert compat.addon_of(chart.name) == addon.name, (addon.name, chart.name)
    assert compat.addon_of("no-such-chart") is None


def test_every_row_has_one_source_and_says_how_it_read_the_bounds() -> None:
    rows = 0
    for chart, entry in DATA["charts"].items():
        for row in entry["rows"]:
            rows += 1
            assert set(row) == {"versions", "kubernetes", "source", "bounds"}, (chart, row)
            source = row["source"]
            assert set(source) == {"url", "ref", "says"}
            assert source["url"].startswith("https://"), source
            assert len(source["ref"]) > 10 and len(source["says"]) > 20, source
            low, high = row["kubernetes"]
            if low is None or high is None:
                # A bound the source does not give is said to be missing, not invented.
                assert "none" in row["bounds"] or "no bound" in row["bounds"], (chart, row)
            if low is not None and high is not None:
                assert compat.minor_of(low) <= compat.minor_of(high), (chart, row)
    assert rows >= 25


def test_a_charts_rows_never_overlap() -> None:
    for chart, entry in DATA["charts"].items():
        spans = sorted((_key(a), _key(b)) for a, b in (r["versions"] for r in entry["rows"]))
        for first, last in spans:
            assert first <= last, chart
        for (_, last), (first, _) in itertools.pairwise(spans):
            assert last < first, f"{chart}: rows overlap"


def _supports(chart: str, version: str, minor: tuple[int, int]) -> bool:
    rng = compat.supported(chart, version)
    return rng is not None and minor in rng


def test_defaults_are_the_newest_vendored_version_supporting_each_minor() -> None:
    vendored = vendored_charts()
    assert [compat.minor_of(m) for m in DATA["minors"]] == MINORS
    for chart in compat.charts():
        versions = [v for name, v in vendored if name == chart]
        assert versions, f"{chart}: nothing vendored"
        for minor in MINORS:
            fitting = [v for v in versions if _supports(chart, v, minor)]
            want = max(fitting, key=_key) if fitting else None
            assert compat.default_version(chart, minor) == want, (chart, minor)
            if want is not None:
                assert (chart, want) in vendored


def test_every_minor_from_1_29_to_1_35_has_a_default_for_every_chart() -> None:
    missing = {
        (chart, minor)
        for chart in compat.charts()
        for minor in MINORS
        if compat.default_version(chart, minor) is None
    }
    # Calico's CRDs are a chart of their own from v3.32 (1.34 to 1.36) only; before, the
    # tigera-operator chart carries them and its default covers every minor.
    assert missing == {("crd.projectcalico.org.v1", (1, m)) for m in range(29, 34)}
    assert all(compat.default_version("tigera-operator", m) for m in MINORS)


def test_every_vendored_version_is_in_the_table() -> None:
    """Each vendored package has a row; the Composition's defaults (tests/fixtures/charts)
    are the defaults of the newest minors."""
    for (chart, version), archive in vendored_charts().items():
        assert compat.supported(chart, version) is not None, (chart, version)
        if archive.parent == CHART_DIR:
            assert compat.default_version(chart, (1, 35)) == version, (chart, version)


def test_the_cloud_controller_managers_range_is_its_image_tags() -> None:
    """The CCM chart supports the minors the function has a cloud-provider-aws release for."""
    version = compat.newest_default("aws-cloud-controller-manager")
    assert version is not None
    rng = compat.supported("aws-cloud-controller-manager", version)
    assert rng is not None
    assert (rng.low, rng.high) == (min(ccm.IMAGE_TAGS), max(ccm.IMAGE_TAGS))
    assert sorted(ccm.IMAGE_TAGS) == [(1, m) for m in range(rng.low[1], rng.high[1] + 1)]  # type: ignore[index]


@pytest.mark.parametrize(
    ("chart", "version", "described"),
    [
        ("cert-manager", "v1.21.1", "1.33 to 1.36"),
        ("cert-manager", "v1.21.7", "1.33 to 1.36"),  # a release covers all its patches
        ("cert-manager", "v1.18.6", "1.29 to 1.33"),
        ("tigera-operator", "v3.32.1", "1.34 to 1.36"),
        ("tigera-operator", "3.29.7", "1.29 to 1.32"),  # with or without the v
        ("aws-vpc-cni", "1.22.4", "1.28 and later"),
        ("aws-vpc-cni", "1.16.2", "1.28 to 1.30"),
        ("aws-vpc-cni", "1.13.4", "1.28"),
        ("aws-load-balancer-controller", "3.5.0", "1.22 and later"),
        ("aws-load-balancer-controller", "1.3.3", "1.16 to 1.21"),
        ("external-dns", "1.17.0", "1.19 to 1.32"),
        ("external-dns", "1.21.1", "1.21 and later"),
        ("aws-ebs-csi-driver", "2.64.0", "any Kubernetes minor (no bound documented)"),
        ("amazon-eks-pod-identity-webhook", "2.6.5", "any Kubernetes minor (no bound documented)"),
        ("eks-pod-identity-agent", "1.2.0", "1.24 and later"),
        ("aws-cloud-controller-manager", "0.0.11", "1.27 to 1.36"),
    ],
)
def test_supported_ranges(chart: str, version: str, described: str) -> None:
    rng = compat.supported(chart, version)
    assert rng is not None
    assert compat.describe(rng) == described == rng.describe()


@pytest.mark.parametrize(
    ("chart", "version"),
    [
        ("no-such-chart", "1.0.0"),
        ("aws-vpc-cni", "1.23.0"),  # newer than the table's newest
        ("aws-vpc-cni", "1.13.3"),  # older than its oldest row
        ("aws-load-balancer-controller", "3.5.1"),
        ("cert-manager", "v1.13.0"),
        ("cert-manager", "latest"),
        ("aws-vpc-cni", ""),
    ],
)
def test_what_the_table_does_not_know_is_none(chart: str, version: str) -> None:
    assert compat.supported(chart, version) is None


def test_membership_and_the_documented_refusals() -> None:
    """The ranges say no where upstream does: an old external-dns or LBC on a new cluster."""
    assert not _supports("external-dns", "1.17.0", (1, 33))
    assert _supports("external-dns", "1.17.0", (1, 32))
    assert not _supports("aws-load-balancer-controller", "1.3.3", (1, 29))
    assert not _supports("cert-manager", "v1.21.1", (1, 32))
    assert not _supports("tigera-operator", "v3.32.1", (1, 33))
    assert not _supports("aws-vpc-cni", "1.16.4", (1, 32))
    assert _supports("aws-vpc-cni", "1.22.4", (1, 35))
    assert _supports("aws-ebs-csi-driver", "2.64.0", (1, 99))
    rng = compat.supported("cert-manager", "v1.21.1")
    assert rng is not None and "1.33" not in rng  # only (major, minor) tuples are minors


def test_pre_releases_sort_before_their_release() -> None:
    # v1.17.1's candidate is not v1.17.1, which the README names: no row has it.
    assert compat.supported("aws-vpc-cni", "1.17.1-rc.1") is None
    assert compat.supported("aws-vpc-cni", "1.22.4-rc.1") == compat.supported("aws-vpc-cni", "1.22.4")
    assert compat.supported("aws-vpc-cni", "1.17.1+build.2") == compat.supported("aws-vpc-cni", "1.17.1")


@pytest.mark.parametrize(
    ("low", "high", "described"),
    [
        ((1, 29), (1, 35), "1.29 to 1.35"),
        ((1, 30), (1, 30), "1.30"),
        ((1, 22), None, "1.22 and later"),
        (None, (1, 32), "up to 1.32"),
        (None, None, "any Kubernetes minor (no bound documented)"),
    ],
)
def test_describe(low: tuple[int, int] | None, high: tuple[int, int] | None, described: str) -> None:
    rng = MinorRange(low, high, SOURCE, "")
    assert rng.describe() == described
    assert ((1, 31) in rng) == ((low is None or low <= (1, 31)) and (high is None or (1, 31) <= high))


def test_minor_of() -> None:
    assert compat.minor_of("v1.33.4") == (1, 33)
    assert compat.minor_of("1.33") == (1, 33)
    assert compat.minor_of("v1.33.1-eks-1234567") == (1, 33)
    assert compat.minor_of("latest") is None


def test_defaults_and_lookups_for_an_unknown_chart_or_minor() -> None:
    assert compat.default_version("no-such-chart", (1, 33)) is None
    assert compat.default_version("cert-manager", (1, 28)) is None
    assert compat.default_version("cert-manager", (1, 32)) == "v1.20.3"
    assert compat.default_version("cert-manager", (1, 30)) == "v1.18.6"
    assert compat.default_version("tigera-operator", (1, 33)) == "v3.31.7"
    assert compat.default_version("aws-vpc-cni", (1, 35)) == "1.22.4"
