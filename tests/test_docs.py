"""The documents say what the code does: docs/architecture.md's tables, citations, paths, commands.

- The node, add-on, Usage and port tables of docs/architecture.md are compared with what the
  add-on declarations give (the registry, each add-on's ``plugin``, gates and builders), so a
  node, gate, Usage or port that changes fails here until the document says it too.
- Every section of docs/architecture.md the code and tests cite (by its heading, in quotes
  after the file's name) is a heading there.
- Every module of ``function/`` is listed under "The modules", and has a layer in "The layers"
  that its imports respect.
- Every repository path, ``make`` target and ``function-cluster-plugin`` subcommand and flag the
  README, SECURITY.md and docs/ name exists.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import accept, plan, registry
from function.accept import Accepted
from function.cluster import ClusterFacts
from function.graph import Ctx, Node, Observed, Readiness
from function.main import cli
from tests.scenarios import example
from tests.test_layers import _graph

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"
DOCS = [ROOT / "README.md", ROOT / "SECURITY.md", *sorted((ROOT / "docs").glob("*.md"))]


# --- reading the markdown ---------------------------------------------------------------------


def _sections(text: str) -> dict[str, str]:
    """Heading text -> the section's text up to the next heading of the same or a higher level."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    in_code = False
    heads: list[tuple[int, int, str]] = []
    for i, line in enumerate(lines):
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"^(#{1,6}) (.+?)\s*$", line)
        if m:
            heads.append((i, len(m.group(1)), m.group(2)))
    for n, (i, level, title) in enumerate(heads):
        end = next((j for j, lv, _ in heads[n + 1 :] if lv <= level), len(lines))
        out[title] = "\n".join(lines[i + 1 : end])
    return out


def _tables(text: str) -> list[list[list[str]]]:
    """The markdown tables in ``text``: rows of cells, without the header and its rule."""
    tables: list[list[list[str]]] = []
    rows: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            rows.append(line)
            continue
        if rows:
            cells = [[c.strip() for c in re.split(r"(?<!\\)\|", r.strip())[1:-1]] for r in rows]
            tables.append(cells[2:])
            rows = []
    return tables


def _table(section: str, first_header: str) -> list[list[str]]:
    """The table of docs/architecture.md's ``section`` whose first column is ``first_header``."""
    text = _sections(ARCHITECTURE.read_text())[section]
    block = text[text.index(f"| {first_header} |") :]
    (table,) = _tables(block.split("\n\n")[0])
    return table


def _code(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _dash(value: str) -> str:
    return value or "—"


# --- what the add-on declarations give ----------------------------------------------------------

EVERYTHING: dict[str, Any] = {
    "dns": {"externalDNS": {"hostedZoneIDs": ["Z0123456789ABC"]}},
    "securityGroups": {"manage": "Always"},
    "irsa": {"mode": "SelfHosted", "podIdentityWebhook": {"certManager": "Install"}},
}
NETWORKS = (
    {"amazonVPC": {}},
    {"calico": {"encapsulation": "VXLAN"}},
    {"calico": {"encapsulation": "IPIP"}},
    {"calico": {"encapsulation": "None"}},
)
CP_INITIALIZED, CP_AVAILABLE, SA_KEY = (
    "control plane initialized",
    "control plane available",
    "service-account key",
)


def _accepted(networking: dict[str, Any]) -> tuple[Accepted, ClusterFacts]:
    xr, required = example("selfhosted-full")
    xr = copy.deepcopy(xr)
    xr["spec"].update(copy.deepcopy(EVERYTHING), networking=networking)
    accepted, facts = accept.accept_with_objects(xr, None, required)
    return accepted, dataclasses.replace(facts, initialized=True, available=True)


def _ready(name: str) -> fnv1.Resource:
    r = fnv1.Resource()
    r.resource.update(
        {
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "atProvider": {"arn": f"arn:aws:iam::111122223333:test/{name}"},
            }
        }
    )
    return r


def _plugins(
    accepted: Accepted, facts: ClusterFacts, observed: dict[str, fnv1.Resource]
) -> tuple[Ctx, dict[str, tuple[str, Node]]]:
    """The call's context and node name -> (plugin, node), as build_plan makes them."""
    ctx = accepted.context(facts, Observed(observed))
    plugins = [p for p in (b(ctx) for b in plan.PLUGIN_BUILDERS) if p is not None]
    ctx.readiness = {n.name: n.readiness for p in plugins for n in p.nodes}
    return ctx, {n.name: (p.name, n) for p in plugins for n in p.nodes}


def _held(node: Node, ctx: Ctx) -> bool:
    return any(gate(ctx) is not None for gate in node.gates)


@dataclasses.dataclass(frozen=True)
class Declared:
    kind: str
    readiness: Readiness
    waits_for: frozenset[str]  # nodes whose readiness a gate asks for, and CP_*/SA_KEY


def _declared() -> dict[tuple[str, str], Declared]:
    """(plugin, node) -> what the declarations give, with everything wanted.

    What a node's first emission waits for is found by probing its gates: with every other
    node observed Ready, one of them (or the control plane, or the key) is made not ready.
    """
    out: dict[tuple[str, str], Declared] = {}
    for networking in NETWORKS:
        accepted, facts = _accepted(networking)
        _, nodes = _plugins(accepted, facts, {})
        everything = {name: _ready(name) for name in nodes}
        full_ctx, _ = _plugins(accepted, facts, everything)
        for name, (plugin, node) in nodes.items():
            others = {k: v for k, v in everything.items() if k != name}
            waits = set()
            for other in nodes.keys() - {name}:
                ctx, _ = _plugins(accepted, facts, {k: v for k, v in others.items() if k != other})
                if _held(node, ctx):
                    waits.add(other)
            for label, changed in (
                (CP_INITIALIZED, {"initialized": False, "available": False}),
                (CP_AVAILABLE, {"available": False}),
                (SA_KEY, {"sa_public_pem": None}),
            ):
                ctx, _ = _plugins(accepted, dataclasses.replace(facts, **changed), others)
                if _held(node, ctx):
                    waits.add(label)
            if CP_AVAILABLE in waits:  # available implies initialized
                waits.discard(CP_INITIALIZED)
            assert not _held(node, full_ctx), name
            body = node.build(full_ctx)
            out[(plugin, name)] = Declared(body["kind"], node.readiness, frozenset(waits))
    out[("(every XR)", plan.HELM_PROVIDER_CONFIG)] = Declared(
        "ProviderConfig", Readiness.EXISTS, frozenset()
    )
    return out


@pytest.fixture(scope="module")
def declared() -> dict[tuple[str, str], Declared]:
    return _declared()


READY_WHEN = {
    "Ready=True": Readiness.CONDITION,
    "Ready=True, or upgraded": Readiness.RELEASE,
    "it exists": Readiness.EXISTS,
}


def test_the_node_table_is_what_the_addons_declare(
    declared: dict[tuple[str, str], Declared],
) -> None:
    documented: dict[tuple[str, str], Declared] = {}
    for node_cell, plugin_cell, kind, emitted_when, ready_when in _table("The nodes", "node"):
        (plugin,) = _code(plugin_cell) or [plugin_cell]
        waits = set(_code(emitted_when))
        waits |= {s for s in (CP_INITIALIZED, CP_AVAILABLE, SA_KEY) if s in emitted_when}
        for pattern in _code(node_cell):
            matches = [n for p, n in declared if p == plugin and fnmatch.fnmatchcase(n, pattern)]
            assert matches, f"{pattern} ({plugin}) is no node the add-on declares"
            for name in matches:
                documented[(plugin, name)] = Declared(
                    kind.split(" ")[0], READY_WHEN[ready_when], frozenset(waits)
                )
    assert sorted(documented) == sorted(declared)
    for key, want in declared.items():
        assert documented[key] == want, key


def test_the_addon_table_is_the_registry() -> None:
    rows = _table("The add-ons", "add-on")
    documented = [tuple(c.strip("`") for c in row) for row in rows]
    expected = []
    for a in registry.ADDONS:
        release, role = a.release, a.role
        policy = ""
        if role is not None:
            policy = role.policy.node if role.policy is not None else role.managed_policy
        expected.append(
            (
                a.name,
                _dash(a.spec_path),
                _dash(release.node if release else ""),
                _dash(f"{release.namespace}/{release.name}" if release else ""),
                _dash(release.service_account if release else ""),
                _dash(role.node if role else ""),
                _dash(role.status_key if role else ""),
                _dash(policy),
            )
        )
    assert documented == expected


def test_the_deletion_order_is_the_declared_usages() -> None:
    rows = _table("Deletion order", "by (deleted first)")
    documented = [(_code(by)[0], _code(of)[0], why) for by, of, why in rows]
    assert documented == [tuple(u) for u in registry.USAGES]


def test_the_port_table_is_what_the_addons_need() -> None:
    needs = {}
    for networking in NETWORKS:
        accepted, _ = _accepted(networking)
        for need in accepted.port_needs:
            needs[need.purpose] = need
    rows = _table("Security groups", "purpose")
    documented = {}
    for purpose, _addon, protocol, ports, _between, capa_list in rows:
        documented[_code(purpose)[0]] = (protocol, ports, _code(capa_list)[0])
    expected = {}
    for purpose, need in needs.items():
        proto = {"-1": "all", "4": "IP-in-IP (4)"}.get(need.protocol, need.protocol)
        if need.protocol not in {"tcp", "udp"}:
            ports = "all"
        elif need.from_port == need.to_port:
            ports = str(need.from_port)
        else:
            ports = f"{need.from_port}-{need.to_port}"
        expected[purpose] = (proto, ports, need.capa_list)
    assert documented == expected


# --- citations and the module list ----------------------------------------------------------------

CITATION = re.compile(r'docs/architecture\.md,\s*"([^"]+)"')


def _citations() -> Iterator[tuple[str, str]]:
    for top in ("function", "tests", "e2e", "scripts", "benchmarks"):
        for path in sorted((ROOT / top).rglob("*.py")):
            # A citation may run over a comment's line break.
            text = re.sub(r"\n\s*#?\s*", " ", path.read_text())
            for section in CITATION.findall(text):
                yield str(path.relative_to(ROOT)), section


def test_every_cited_section_exists() -> None:
    headings = set(_sections(ARCHITECTURE.read_text()))
    cited = list(_citations())
    assert len(cited) >= 10  # guards the search itself
    assert [c for c in cited if c[1] not in headings] == []


def test_the_sections_the_design_asks_for_exist() -> None:
    headings = set(_sections(ARCHITECTURE.read_text()))
    assert {
        "The layers",
        "The path of a request",
        "The resource graph",
        "Names and flavours",
        "Security groups",
        "The cloud controller manager",
        "external-dns",
        "The cluster's own deletion",
        "Bad input",
        "Adding an add-on",
        "The modules",
    } <= headings


def test_every_module_is_listed() -> None:
    listed = set(_code(_sections(ARCHITECTURE.read_text())["The modules"]))
    modules = {
        str(p.relative_to(ROOT))
        if p.name != "__init__.py" or p.parent.name != "data"
        else str(p.parent.relative_to(ROOT)) + "/"
        for p in (ROOT / "function").rglob("*.py")
    }
    assert sorted(modules - listed) == []
    assert (
        sorted(
            m
            for m in listed
            if m.startswith("function/") and m.endswith(".py") and m not in modules
        )
        == []
    )


# --- paths, make targets and commands the documents name ---------------------------------------

# The checkout's top-level folders (not what a build or a release writes beside them).
TOP = sorted(
    p.name
    for p in ROOT.iterdir()
    if p.is_dir() and not p.name.startswith(".") and p.name not in {"dist", "build"}
)
PATH = re.compile(r"(?<![\w./~-])((?:" + "|".join(map(re.escape, TOP)) + r")/[\w./<>*-]*)")


def _paths(text: str) -> set[str]:
    return {p.rstrip(".") for p in PATH.findall(text)}


def _exists(path: str) -> bool:
    pattern = re.sub(r"<[^>]+>", "*", path).rstrip("/")
    return bool(list(ROOT.glob(pattern))) if "*" in pattern else (ROOT / pattern).exists()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_path_named_exists(doc: Path) -> None:
    paths = _paths(doc.read_text())
    assert paths  # guards the search
    assert sorted(p for p in paths if not _exists(p)) == []


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", text, re.MULTILINE))


def _code_spans(text: str) -> list[str]:
    """Inline code and the lines of fenced code blocks."""
    spans = re.findall(r"(?<!`)`([^`\n]+)`(?!`)", text)
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        spans += block.replace("\\\n", " ").splitlines()  # continued lines as one
    return spans


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_make_target_named_exists(doc: Path) -> None:
    named = set()
    for span in _code_spans(doc.read_text()):
        named |= set(re.findall(r"(?:^|[;&|]\s*)make ([a-z][\w-]*)", span.strip()))
    targets = _make_targets()
    assert sorted(named - targets) == []


def _command(words: list[str]) -> tuple[click.Command, list[str]] | None:
    """The click command a command line names, and its remaining words."""
    command: click.Command = cli
    rest = words
    while isinstance(command, click.Group) and rest and rest[0] in command.commands:
        command, rest = command.commands[rest[0]], rest[1:]
    return None if command is cli else (command, rest)


def _options(command: click.Command) -> set[str]:
    names = set()
    for param in command.params:
        names |= {*param.opts, *param.secondary_opts}
    return names


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_command_and_flag_named_exists(doc: Path) -> None:
    problems = []
    checked = 0
    for span in _code_spans(doc.read_text()):
        m = re.search(r"function-cluster-plugin ((?:[a-z][\w-]* ?)+)(.*)", span)
        if m is None:
            continue
        words = m.group(1).split()
        found = _command(words)
        if found is None:
            if words and words[0] not in {"serve"}:  # a sentence, not a command line
                continue
            problems.append(f"{span}: no such command")
            continue
        command, _ = found
        flags = re.findall(r"(?<![\w-])(--[a-z][\w-]*)", m.group(2))
        problems += [f"{span}: {f}" for f in flags if f not in _options(command) | {"--help"}]
        checked += 1
    assert problems == []
    if doc.name == "README.md":
        assert checked >= 5


def test_the_serve_flags_the_readme_lists_exist() -> None:
    operating = _sections((ROOT / "README.md").read_text())["Operating"]
    flags = set(re.findall(r"`(--[\w\[\]-]+)`", operating))
    assert flags
    options = _options(cli.commands["serve"])
    for flag in flags:
        for spelled in (
            {flag.replace("[no-]", ""), flag.replace("[no-]", "no-")} if "[no-]" in flag else {flag}
        ):
            assert spelled in options, spelled


def test_the_layer_table_is_the_import_graph() -> None:
    """Every module has a layer in "The layers", and imports only from its own or lower ones."""
    rows = _table("The layers", "layer")
    layer_of = {name: i for i, row in enumerate(rows) for name in _code(row[1])}

    def layer(module: str) -> int | None:
        short = module.removeprefix("function.")
        for package in ("addons", "aws"):
            if short.startswith(f"{package}."):
                return layer_of.get(f"{package}/*")
        return layer_of.get(short)

    graph = _graph()
    packages = {"function", "function.addons", "function.aws", "function.data"}
    assert sorted(m for m in graph if m not in packages and layer(m) is None) == []
    upward = [
        (m, d)
        for m, deps in graph.items()
        for d in deps
        if m not in packages and (layer(d) or 0) > (layer(m) or 0)
    ]
    assert upward == []
