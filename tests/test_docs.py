"""The documents say what the code does: docs/architecture.md's tables, citations, paths, commands.

- The node, add-on, Usage and port tables of docs/architecture.md are compared with what the
  add-on declarations give (the registry, each add-on's ``plugin``, gates and builders), so a
  node, gate, Usage or port that changes fails here until the document says it too.
- Every section of a docs/ page the code and tests cite (by its heading, in quotes after the
  file's name, e.g. docs/architecture.md) is a heading there.
- Every module of ``function/`` and ``function_tools/`` is listed under "The modules", and has a layer in "The layers"
  that its imports respect.
- Every repository path, ``make`` target and ``function-cluster-plugin`` subcommand and flag the
  README, SECURITY.md and docs/ name exists; every ``function-cluster-plugin`` command line they
  and the examples' comments show parses with the CLI, and runs (exit 0) where it reads only
  the checkout's files.
- The README's install checklist is at most eight steps of one command each, with no YAML to
  edit; it applies what ``make release`` writes, and generates the cluster the template values
  are for. The opening names the three paths and what ``make e2e`` needs; the table of contents
  links every section; the README is at most 400 lines and links every page of docs/, each a
  page of the docs site (``mkdocs.yml``'s nav, docs/index.md), which ``tests/test_docs_site.py``
  builds with broken links and anchors as errors.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import fnmatch
import io
import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import plan, registry
from function.accept import Accepted
from function.cluster import ClusterFacts
from function.context import CallContext
from function.flavour import LEGACY_XR, NAMESPACED_XR
from function.graph import Node, Readiness
from function.observed import Observed
from function.step_input import StepInput
from function_tools import apigen, resolve
from function_tools.cli import cli
from tests import readme
from tests.readme import README
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
    accepted, facts = resolve.accept_with_objects(xr, None, required)
    # The newest minor: Calico's CRDs are a Release of their own from tigera-operator v3.32
    # (Kubernetes 1.34), the table lists every node some cluster gets.
    newest = {"kubernetes_version": "v1.35.0", "kubernetes_target_version": "v1.35.0"}
    return accepted, dataclasses.replace(facts, initialized=True, available=True, **newest)


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
) -> tuple[CallContext, dict[str, tuple[str, Node]]]:
    """The call's context and node name -> (plugin, node), as build_plan makes them."""
    ctx = accepted.context(facts, Observed(observed))
    plugins = [p for p in (b(ctx) for b in plan.PLUGIN_BUILDERS) if p is not None]
    ctx = dataclasses.replace(ctx, readiness={n.name: n.readiness for p in plugins for n in p.nodes})
    return ctx, {n.name: (p.name, n) for p in plugins for n in p.nodes}


def _held(node: Node, ctx: CallContext) -> bool:
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

CITATION = re.compile(r'docs/([\w-]+\.md),\s*"([^"]+)"')


def _citations() -> Iterator[tuple[str, str, str]]:
    """(citing file, cited page of docs/, cited section)."""
    for top in ("function", "function_tools", "tests", "e2e", "scripts", "benchmarks"):
        for path in sorted((ROOT / top).rglob("*.py")):
            # A citation may run over a comment's line break.
            text = re.sub(r"\n\s*#?\s*", " ", path.read_text())
            for page, section in CITATION.findall(text):
                yield str(path.relative_to(ROOT)), page, section


def test_every_cited_section_exists() -> None:
    cited = list(_citations())
    assert len([c for c in cited if c[1] == ARCHITECTURE.name]) >= 10  # guards the search itself
    missing = [
        c
        for c in cited
        if not (ROOT / "docs" / c[1]).is_file()
        or c[2] not in _sections((ROOT / "docs" / c[1]).read_text())
    ]
    assert missing == []


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
        for package in ("function", "function_tools")
        for p in (ROOT / package).rglob("*.py")
    }
    assert sorted(modules - listed) == []
    assert (
        sorted(
            m
            for m in listed
            if m.startswith(("function/", "function_tools/"))
            and m.endswith(".py")
            and m not in modules
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


def test_the_serve_flags_the_docs_list_exist() -> None:
    operating = _sections((ROOT / "docs" / "operating.md").read_text())["Operating"]
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
        if module.split(".", maxsplit=1)[0] == "function_tools":
            return layer_of.get("function_tools/*")
        short = module.removeprefix("function.")
        if short.startswith("addons."):
            return layer_of.get("addons/*")
        return layer_of.get(short)

    graph = _graph()
    packages = {"function", "function.addons", "function.data"}
    assert sorted(m for m in graph if m not in packages and layer(m) is None) == []
    upward = [
        (m, d)
        for m, deps in graph.items()
        for d in deps
        if m not in packages and (layer(d) or 0) > (layer(m) or 0)
    ]
    assert upward == []


# --- every command line shown, parsed (and run where it reads only local files) ----------------

EXAMPLES = ROOT / "examples"
# Commands that read only local files and write only to stdout: shown with real files, they run.
RUNS_LOCALLY = {
    ("render",),
    ("simulate",),
    ("issuer",),
    ("template-values",),
    ("aws", "provider-policy"),
    ("aws", "shared-bucket-policy"),
    ("aws", "provider-role"),
}
_SHELL_END = re.compile(r"\s(?:\||>|&&|;)\s|\)\"|`")


@dataclasses.dataclass(frozen=True)
class Shown:
    where: str
    base: Path  # what its relative paths are relative to
    line: str  # from "function-cluster-plugin" to the end of the command


def _shown_in(text: str, where: str, base: Path) -> list[Shown]:
    out = []
    for span in _code_spans(text):
        for m in re.finditer(r"function-cluster-plugin (?=[a-z])", span):
            rest = span[m.end() :]
            end = _SHELL_END.search(rest)
            out.append(Shown(where, base, rest[: end.start()] if end else rest))
    return out


def _example_comments() -> list[Shown]:
    """Commands in the examples' comments: in backticks, or a comment line of its own (run in
    the example's folder, as its functions.yaml says)."""
    out = []
    for path in sorted(EXAMPLES.rglob("*")):
        if not path.is_file():
            continue
        rel = str(path.relative_to(ROOT))
        for line in path.read_text(encoding="utf-8").splitlines():
            comment = line.partition("#")[2].strip() if "#" in line else ""
            if "function-cluster-plugin " not in comment:
                continue
            if "`" in comment:
                out += _shown_in(comment, rel, ROOT)
            elif comment.startswith("function-cluster-plugin "):
                out += _shown_in(f"`{comment}`", rel, path.parent)
    return out


def _everything_shown() -> list[Shown]:
    shown = []
    for doc in DOCS:
        shown += _shown_in(doc.read_text(encoding="utf-8"), doc.name, ROOT)
    return shown + _example_comments()


def _is_placeholder(value: str) -> bool:
    return "/" not in value or value.startswith(("<", "~")) or "<" in value


def _parse(shown: Shown) -> tuple[tuple[str, ...], list[str] | None, str | None]:  # noqa: PLR0911
    """(the subcommand, its arguments when they can be taken literally, a problem).

    A subcommand named without arguments is a mention in a sentence, not a command line.
    """
    try:
        words = shlex.split(shown.line, comments=True)
    except ValueError as err:
        return (), None, f"not a shell line: {err}"
    found = _command(words)
    if found is None:
        return (), None, None if words and words[0] != "serve" else "no such command"
    command, args = found
    path = tuple(words[: len(words) - len(args)])
    if not args:
        return path, None, None
    if any(a.startswith("[") or "..." in a or a.startswith("<") for a in args):
        return path, None, None  # a synopsis: its flags are checked by name above
    try:
        with _chdir(shown.base), contextlib.redirect_stdout(io.StringIO()):
            command.make_context(" ".join(path), list(args))
    except click.exceptions.Exit:
        return path, None, None  # --help
    except click.BadParameter as err:
        message = err.format_message()
        bad = re.search(r"'([^']+)' does not exist", message)
        if bad and _is_placeholder(bad.group(1)):
            return path, None, None  # a file of your own (xr.yaml), not one of the checkout
        return path, None, message
    except click.UsageError as err:
        return path, None, err.format_message()
    return path, args, None


@contextlib.contextmanager
def _chdir(path: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def test_every_command_line_shown_parses_with_the_cli() -> None:
    shown = _everything_shown()
    where = {s.where for s in shown}
    assert "README.md" in where and any(w.startswith("examples/") for w in where)
    problems = [f"{s.where}: {s.line}: {p}" for s in shown for _, _, p in [_parse(s)] if p]
    assert problems == []


def test_every_command_line_shown_with_the_checkouts_files_runs() -> None:
    """Those that read only local files run as shown, from where they are shown, and exit 0."""
    ran = []
    problems = []
    seen = set()
    for shown in _everything_shown():
        path, args, _ = _parse(shown)
        if args is None or path not in RUNS_LOCALLY or "--create" in args:
            continue
        key = (shown.base, path, tuple(args))
        if key in seen:
            continue
        seen.add(key)
        with _chdir(shown.base):
            result = CliRunner().invoke(cli, [*path, *args])
        if result.exit_code != 0:
            problems.append(
                f"{shown.where}: {shown.line}: exit {result.exit_code}: {result.output[-300:]}"
            )
        ran.append(shown.line)
    assert problems == []
    assert len(ran) >= 8, ran  # guards the search


# --- the install checklist -------------------------------------------------------------------


def test_the_install_checklist_is_at_most_eight_steps_of_one_command_each() -> None:
    numbers = [n for n, _ in readme.steps()]
    assert numbers == list(range(1, len(numbers) + 1))
    assert 1 <= len(numbers) <= 8
    commands = readme.step_commands()
    assert [len(c) for c in commands] == [1] * len(numbers), commands
    # No YAML to write or edit: the checklist shows none.
    assert "```yaml" not in readme.checklist()


def test_the_checklist_applies_what_the_release_writes() -> None:
    from function_tools.packaging import HOME_SOURCE
    from scripts import release

    files = release.install_files(HOME_SOURCE)
    text = readme.checklist()
    versions = {m.group("version") for m in readme.RELEASE_INSTALL.finditer(text)}
    assert versions == {HOME_SOURCE.version}
    applied, listed = readme.install_commands()
    namespaced = release.flavour_folder(NAMESPACED_XR)
    assert applied == [f"{namespaced}/", f"{namespaced}/{release.PROVIDER_CONFIG_FOLDER}/"]
    for folder in applied:
        kinds = {
            d["kind"]
            for f, body in files.items()
            if f.rpartition("/")[0] + "/" == folder
            for d in yaml.safe_load_all(body)
            if d
        }
        assert kinds, f"install/{folder} holds no file of the release"
    assert kinds == {StepInput().aws_provider_config.kind}
    legacy = f"install/{release.flavour_folder(LEGACY_XR)}/ instead of install/{namespaced}/"
    assert legacy in " ".join(text.replace("`", "").split())
    assert listed == ["configuration", "function", "provider"]
    # The wait of step 4 names the Configuration step 3 applies.
    configuration = apigen.configuration_package(NAMESPACED_XR).name
    assert f"configuration/{configuration} " in text


def test_the_checklist_generates_the_cluster_the_template_values_are_for() -> None:
    """template-values and clusterctl name the same cluster and namespace, every variable the
    template needs without a default is set by one of them or clusterctl, and the wait names
    the ClusterPlugin the template makes."""
    from function_tools import template_values

    commands = [c for (c,) in readme.step_commands()]
    (values,) = [
        shlex.split(c.split('"$(')[1].rstrip(')"')) for c in commands if "template-values" in c
    ]
    (generate,) = [c for c in commands if "clusterctl generate cluster" in c]
    words = shlex.split(generate.split("|")[0])
    env = {w.split("=")[0] for w in words if re.fullmatch(r"[A-Z_]+=\S*", w)}
    words = [w for w in words if not re.fullmatch(r"[A-Z_]+=\S*", w)]
    cluster, namespace = (
        values[values.index("template-values") + 1],
        values[values.index("--namespace") + 1],
    )
    assert words[3] == cluster
    assert words[words.index("--target-namespace") + 1] == namespace
    assert words[words.index("--from") + 1] == template_values.TEMPLATE
    template = (ROOT / template_values.TEMPLATE).read_text()
    needed = set(re.findall(r"\$\{([A-Z_]+)\}", template))
    clusterctl = {
        "CLUSTER_NAME",
        "NAMESPACE",
        "KUBERNETES_VERSION",
        "CONTROL_PLANE_MACHINE_COUNT",
        "WORKER_MACHINE_COUNT",
    }
    given = (
        env
        | clusterctl
        | set(template_values.TemplateValues.__dataclass_fields__ and _template_variables())
    )
    assert sorted(needed - given) == []
    assert f"clusterplugin/{cluster} -n {namespace}" in commands[-1]


def _template_variables() -> set[str]:
    from function_tools import template_values

    values = template_values.compute("team-a", "demo", "us-east-1")
    return set(values.variables())


def test_the_opening_names_the_three_paths_and_what_make_e2e_needs() -> None:
    from scripts import system_packages

    text = README.read_text(encoding="utf-8")
    opening = text[: text.index("\n## Contents")]
    for command in ("make demo", "make test", "make e2e", "#install-on-a-cluster"):
        assert command in opening, command
    assert opening.index("make demo") < opening.index("make e2e")
    e2e = opening[opening.index("\n`make e2e` (contributors") :].lstrip()
    paragraph = (e2e + "\n\n")[: (e2e + "\n\n").index("\n\n")]
    assert "Go 1.26" in paragraph
    assert "scripts/system_packages.py" in paragraph
    for package in set(system_packages.NEEDS["e2e"].values()):
        assert f"`{package}`" in paragraph, package


def _anchor(heading: str) -> str:
    """A heading's anchor, as GitHub and mkdocs make it (for the headings these documents have)."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_the_table_of_contents_links_every_section() -> None:
    text = README.read_text(encoding="utf-8")
    headings = [h for h in _sections(text) if text.count(f"\n## {h}\n")]
    contents = _sections(text)["Contents"]
    anchors = set(re.findall(r"\]\(#([\w-]+)\)", contents))

    assert sorted(anchors - {_anchor(h) for h in headings}) == []
    unlinked = [h for h in headings if h != "Contents" and _anchor(h) not in anchors]
    assert unlinked == []


# --- the README is a user's path; the rest is the docs site ------------------------------------

PAGES = sorted((ROOT / "docs").glob("*.md"))
ELSEWHERE = "Where everything else is"


def test_the_readme_is_at_most_400_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 400, len(lines)


def test_the_readme_keeps_the_checklist_and_one_example_and_points_to_the_rest() -> None:
    text = README.read_text(encoding="utf-8")
    headings = [h for h in _sections(text) if text.count(f"\n## {h}\n")]
    assert headings == ["Contents", "Install on a cluster", "Try it without a cluster", ELSEWHERE]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_docs_page_is_on_the_site_and_linked_from_the_readme(page: Path) -> None:
    """A page has one title, the nav of mkdocs.yml lists it, and the README's last section and the
    site's home page link it."""
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# "), page.name
    assert len(_titles(text)) == 1, _titles(text)
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    assert page.name in [next(iter(entry.values())) for entry in nav]
    if page.name != "index.md":
        elsewhere = _sections(README.read_text(encoding="utf-8"))[ELSEWHERE]
        assert re.search(rf"\]\(docs/{re.escape(page.name)}(#[\w-]+)?\)", elsewhere), page.name
        home = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
        assert f"]({page.name})" in home, page.name


def _titles(text: str) -> list[str]:
    """The ``# `` headings outside code blocks."""
    outside = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.findall(r"^# (.+)$", outside, re.MULTILINE)


def test_the_readme_links_into_the_docs_resolve() -> None:
    """Every ``docs/<page>.md#anchor`` the README links is a page with that heading (the built
    site's ids are checked in tests/test_docs_site.py too)."""
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\((docs/[\w-]+\.md)(?:#([\w-]+))?\)", text)
    assert len(links) >= len(PAGES) - 1  # guards the search
    problems = []
    for path, anchor in links:
        page = ROOT / path
        if not page.is_file():
            problems.append(path)
        elif anchor and anchor not in {_anchor(h) for h in _sections(page.read_text())}:
            problems.append(f"{path}#{anchor}")
    assert problems == []
