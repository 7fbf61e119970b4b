"""The load balancer controller's IAM policy per chart version, and the union of policies.

- The vendored policies are the upstream files byte for byte: their git blob ids and sha256
  are the ones function/data/PROVENANCE.md records from the controller's repository.
- The chart version -> controller version table agrees with PROVENANCE.md's eks-charts rows,
  and each controller version takes the newest vendored policy not after it.
- ``lbc_policy(partition, chart)`` is that file minified, in the partition's ARNs; a chart
  version outside the table is refused with a clear error.
- ``union_policy`` grants exactly what its inputs grant: every (effect, action, resource,
  condition) of each input, nothing else; no duplicate Sid. Checked on every pair of
  versions and on made-up policies (Sids, NotAction, wildcards).
- Sizes: each version and each union of adjacent versions, minified, in every partition,
  against IAM's 6,144-character limit for a managed policy.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from function import compat, policies
from function.names import PARTITIONS, Partition
from function.policies import (
    LBC_DEFAULT_CHART_VERSION,
    UnknownChartVersionError,
    lbc_app_version,
    lbc_chart_versions,
    lbc_policy,
    lbc_policy_version,
    union_policy,
)
from function.step_input import Charts
from tests import strategies as gen

DATA = Path(resources.files("function.data"))  # type: ignore[arg-type]
PROVENANCE = (DATA / "PROVENANCE.md").read_text()
AWS = PARTITIONS["aws"]
MANAGED_POLICY_LIMIT = 6144  # characters, whitespace not counted (IAM quotas)

# One chart per distinct policy, oldest first: the controller versions whose policy changed.
CHART_PER_POLICY = {
    "v2.7.0": "1.7.0",
    "v2.9.0": "1.9.0",
    "v2.10.0": "1.10.0",
    "v2.11.0": "1.11.0",
    "v2.12.0": "1.12.0",
    "v2.13.0": "3.5.0",
}
# Minified sizes in the aws partition, measured (this test is where they are recorded).
SIZES = {"v2.7.0": 4840, "v2.9.0": 4938, "v2.10.0": 4968, "v2.11.0": 5068, "v2.12.0": 5170, "v2.13.0": 5196}
# Each version grants all the one before it did: the union of adjacent ones is the newer.
UNION_SIZES = {
    ("v2.7.0", "v2.9.0"): 4938,
    ("v2.9.0", "v2.10.0"): 4968,
    ("v2.10.0", "v2.11.0"): 5068,
    ("v2.11.0", "v2.12.0"): 5170,
    ("v2.12.0", "v2.13.0"): 5196,
}


def _git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 - git's id


def _policy_rows() -> list[tuple[str, str, str, str, str]]:
    """(file, tag, commit, git blob, sha256) of PROVENANCE.md's policy table."""
    return re.findall(
        r"^\| `(aws-load-balancer-controller-iam_policy-[^`]+\.json)` \| (v[\d.]+) \| `([0-9a-f]{40})` "
        r"\| `([0-9a-f]{40})` \| `([0-9a-f]{64})` \|",
        PROVENANCE,
        re.M,
    )


def test_vendored_policies_are_the_upstream_files_byte_for_byte() -> None:
    rows = _policy_rows()
    files = sorted(p.name for p in DATA.glob("aws-load-balancer-controller-iam_policy-*.json"))
    assert sorted(r[0] for r in rows) == files
    assert len(files) == len(CHART_PER_POLICY)
    for name, tag, _commit, blob, sha256 in rows:
        data = (DATA / name).read_bytes()
        assert _git_blob(data) == blob, f"{name} differs from {tag}:docs/install/iam_policy.json"
        assert hashlib.sha256(data).hexdigest() == sha256, name
        assert name == f"aws-load-balancer-controller-iam_policy-{tag}.json"


def test_the_blob_check_can_fail() -> None:
    name, _tag, _commit, blob, _sha = _policy_rows()[0]
    data = (DATA / name).read_bytes()
    assert _git_blob(data.replace(b'"Allow"', b'"Deny"', 1)) != blob
    assert _git_blob(data + b"\n") != blob


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.removeprefix("v").split("."))


def test_chart_versions_follow_the_published_charts() -> None:
    table = json.loads((DATA / "aws-load-balancer-controller-versions.json").read_text())["charts"]
    published = dict(re.findall(r"^\| (\d+\.\d+\.\d+) \| (v\d+\.\d+\.\d+) \| v0\.0\.\d+ \| `[0-9a-f]{40}` \|$", PROVENANCE, re.M))
    assert {chart: row["app"] for chart, row in table.items()} == published
    assert list(table) == sorted(table, key=_version), "oldest first"
    assert lbc_chart_versions() == tuple(table)
    assert lbc_chart_versions()[0] == "1.7.0" and lbc_chart_versions()[-1] == "3.5.0"
    groups = sorted(CHART_PER_POLICY, key=_version)
    for chart, row in table.items():
        # The newest policy whose first tag is not after the controller version.
        want = max((g for g in groups if _version(g) <= _version(row["app"])), key=_version)
        assert row["policy"] == want, (chart, row)
        assert lbc_app_version(chart) == row["app"]
        assert lbc_policy_version(chart) == want
    assert LBC_DEFAULT_CHART_VERSION == compat.newest_default(Charts().load_balancer_controller.name)


def test_lbc_policy_is_the_minified_file_of_the_chart_version() -> None:
    for policy, chart in CHART_PER_POLICY.items():
        raw = json.loads((DATA / f"aws-load-balancer-controller-iam_policy-{policy}.json").read_text())
        text = lbc_policy(AWS, chart)
        assert json.loads(text) == raw
        assert text == json.dumps(raw, separators=(",", ":"))
        assert len(text) == SIZES[policy], (policy, len(text))
    assert lbc_policy(AWS) == lbc_policy(AWS, "3.5.0") == lbc_policy(AWS, "v3.5.0")
    assert lbc_policy(AWS, "1.13.0") == lbc_policy(AWS, "3.0.0") == lbc_policy(AWS, "3.5.0")
    assert lbc_policy(AWS, "1.12.0") != lbc_policy(AWS, "1.13.0")


@pytest.mark.parametrize("version", ["1.6.2", "1.5.0", "3.5.1", "4.0.0", "1.12.1", "latest"])
def test_a_chart_version_outside_the_table_is_refused_by_name(version: str) -> None:
    with pytest.raises(UnknownChartVersionError) as raised:
        lbc_policy(AWS, version)
    err = raised.value
    assert isinstance(err, ValueError)
    assert (err.chart, err.version, err.known) == ("aws-load-balancer-controller", version, "1.7.0 to 3.5.0")
    assert str(err) == (
        f"aws-load-balancer-controller chart {version} is not one the function has an IAM policy "
        "for (it knows 1.7.0 to 3.5.0)"
    )
    with pytest.raises(UnknownChartVersionError):
        lbc_policy_version(version)


@pytest.mark.parametrize("partition", ["aws-cn", "aws-us-gov"])
def test_the_partition_rewrite_changes_only_the_arn_partition(partition: str) -> None:
    p = PARTITIONS[partition]
    for chart in CHART_PER_POLICY.values():
        text = lbc_policy(p, chart)
        assert '"arn:aws:' not in text
        assert text.count(f'"arn:{partition}:') == lbc_policy(AWS, chart).count('"arn:aws:') > 0
        assert text.replace(f'"arn:{partition}:', '"arn:aws:') == lbc_policy(AWS, chart)


# --- the union, checked by expanding statements ------------------------------------------


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def grants(text: str) -> set[tuple[str, ...]]:
    """Every (effect, principal, action or NotAction, resource or NotResource, condition) a
    policy names: two policies with equal sets grant and deny exactly the same."""
    out = set()
    for s in _list(json.loads(text)["Statement"]):
        principal = json.dumps([s.get("Principal"), s.get("NotPrincipal")], sort_keys=True)
        condition = json.dumps(s.get("Condition"), sort_keys=True)
        action_key = "NotAction" if "NotAction" in s else "Action"
        resource_key = "NotResource" if "NotResource" in s else "Resource"
        if action_key == "NotAction" or resource_key == "NotResource":
            # An inverted statement only means something whole: its sets, not their members.
            acts = [json.dumps(sorted(_list(s[action_key])))]
            ress = [json.dumps(sorted(_list(s[resource_key])))]
        else:
            acts, ress = _list(s[action_key]), _list(s[resource_key])
        for a, r in itertools.product(acts, ress):
            out.add((s["Effect"], principal, action_key, a, resource_key, r, condition))
    return out


def union_problems(inputs: tuple[str, ...], union: str) -> list[str]:
    doc = json.loads(union)
    problems = []
    if doc.get("Version") != "2012-10-17":
        problems.append(f"Version {doc.get('Version')!r}")
    sids = [s["Sid"] for s in doc["Statement"] if "Sid" in s]
    if len(sids) != len(set(sids)):
        problems.append(f"duplicate Sids {sids}")
    if any(not re.fullmatch(r"[A-Za-z0-9]*", sid) for sid in sids):
        problems.append(f"a Sid that is not alphanumeric: {sids}")
    want = set().union(*(grants(t) for t in inputs))
    got = grants(union)
    if got - want:
        problems.append(f"grants more: {sorted(got - want)[:3]}")
    if want - got:
        problems.append(f"grants less: {sorted(want - got)[:3]}")
    if union != json.dumps(doc, separators=(",", ":")):
        problems.append("not compact JSON")
    return problems


def _versions(partition: Partition) -> list[str]:
    return [lbc_policy(partition, chart) for chart in CHART_PER_POLICY.values()]


@pytest.mark.parametrize("partition", sorted(PARTITIONS))
def test_the_union_of_any_two_versions_grants_exactly_both(partition: str) -> None:
    docs = _versions(PARTITIONS[partition])
    for a, b in itertools.product(docs, repeat=2):
        assert union_problems((a, b), union_policy(a, b)) == []
    everything = union_policy(*docs)
    assert union_problems(tuple(docs), everything) == []
    gen.figure("iam", "LBC policy unions checked", len(docs) ** 2 + 1)


def test_a_union_with_itself_is_the_policy() -> None:
    for doc in _versions(AWS):
        assert union_policy(doc) == doc
        assert union_policy(doc, doc) == doc


def test_the_union_check_catches_a_wrong_union() -> None:
    """Control: the expansion sees one action dropped, one added, or a condition lost."""
    a, b = lbc_policy(AWS, "1.12.0"), lbc_policy(AWS, "3.5.0")
    good = json.loads(union_policy(a, b))
    dropped = json.loads(json.dumps(good))
    dropped["Statement"][1]["Action"].pop()
    widened = json.loads(json.dumps(good))
    widened["Statement"][1]["Action"].append("ec2:DeleteVpc")
    unconditioned = json.loads(json.dumps(good))
    next(s for s in unconditioned["Statement"] if "Condition" in s).pop("Condition")
    for bad in (dropped, widened, unconditioned):
        assert union_problems((a, b), json.dumps(bad, separators=(",", ":")))


ACTIONS = st.sampled_from(["s3:GetObject", "s3:PutObject", "s3:List*", "ec2:Describe*", "iam:PassRole"])
RESOURCES = st.sampled_from(["*", "arn:aws:s3:::a/*", "arn:aws:s3:::b", "arn:aws:iam::1:role/r"])
CONDITIONS = st.sampled_from(
    [None, {"StringEquals": {"aws:RequestTag/k": "v"}}, {"Null": {"aws:ResourceTag/k": "false"}}]
)


@st.composite
def statements(draw: st.DrawFn) -> dict[str, Any]:
    s: dict[str, Any] = {"Effect": draw(st.sampled_from(["Allow", "Allow", "Deny"]))}
    if draw(st.booleans()):
        s["Sid"] = draw(st.sampled_from(["A", "B", "Read"]))
    actions = draw(st.lists(ACTIONS, min_size=1, max_size=3, unique=True))
    s["NotAction" if draw(st.integers(0, 9)) == 0 else "Action"] = actions if len(actions) > 1 or draw(st.booleans()) else actions[0]
    res = draw(st.lists(RESOURCES, min_size=1, max_size=2, unique=True))
    s["Resource"] = res if len(res) > 1 or draw(st.booleans()) else res[0]
    condition = draw(CONDITIONS)
    if condition:
        s["Condition"] = condition
    return s


@st.composite
def policy_texts(draw: st.DrawFn) -> str:
    doc = {"Version": "2012-10-17", "Statement": draw(st.lists(statements(), min_size=1, max_size=4))}
    sids = [s.get("Sid") for s in doc["Statement"] if "Sid" in s]
    if len(sids) != len(set(sids)):  # inputs are valid policies: unique Sids each
        for i, s in enumerate(doc["Statement"]):
            if "Sid" in s:
                s["Sid"] = f"S{i}"
    return json.dumps(doc)


@gen.profile(fast=60, soak=2000)
@given(st.lists(policy_texts(), min_size=1, max_size=3))
def test_the_union_of_any_policies_grants_exactly_theirs(texts: list[str]) -> None:
    union = union_policy(*texts)
    assert union_problems(tuple(texts), union) == []


def test_union_refuses_what_it_cannot_merge() -> None:
    with pytest.raises(ValueError, match="at least one"):
        union_policy()
    with pytest.raises(ValueError, match="2012-10-17"):
        union_policy('{"Version":"2008-10-17","Statement":[]}')


# --- sizes ------------------------------------------------------------------------------


def _minified_length(text: str) -> int:
    return len(re.sub(r"\s", "", text))


@pytest.mark.parametrize("partition", sorted(PARTITIONS))
def test_every_version_and_adjacent_union_fits_a_managed_policy(partition: str) -> None:
    p = PARTITIONS[partition]
    sizes = {}
    for policy, chart in CHART_PER_POLICY.items():
        sizes[policy] = _minified_length(lbc_policy(p, chart))
    pairs = list(itertools.pairwise(CHART_PER_POLICY))
    unions = {
        (a, b): _minified_length(union_policy(lbc_policy(p, CHART_PER_POLICY[a]), lbc_policy(p, CHART_PER_POLICY[b])))
        for a, b in pairs
    }
    assert max([*sizes.values(), *unions.values()]) <= MANAGED_POLICY_LIMIT, (sizes, unions)
    if partition == "aws":
        assert sizes == SIZES
        assert unions == UNION_SIZES
    # A longer partition name lengthens every ARN: still within the limit, never shorter.
    assert all(sizes[k] >= SIZES[k] for k in SIZES)


def test_policies_module_keeps_one_policy_per_version_in_memory() -> None:
    policies.lbc_policy.cache_clear()
    policies._lbc_policy_aws.cache_clear()
    for chart in lbc_chart_versions():
        lbc_policy(AWS, chart)
    assert policies._lbc_policy_aws.cache_info().currsize == len(CHART_PER_POLICY)
