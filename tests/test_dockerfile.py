"""Static checks of the Dockerfile and .dockerignore, without a Docker engine.

crossplane/function-template-python builds its venv on Debian 13 (Python 3.13)
and runs it on distroless debian12 (Python 3.11), where it cannot import
(function-template-python#167). Nothing short of running the image shows that,
and there is no Docker engine in CI, so this module reads the Dockerfile and
checks the properties the image depends on: build and runtime on the same Debian
release, a Python that satisfies ``requires-python``, a wheel installed into a
venv copied to the same path, a non-root user, port 9443 and the ``serve``
entrypoint.

``dockerfile_problems`` returns one message per broken property, each starting
with a ``[key]``; the tests assert it finds nothing in the real files and the
right keys in deliberately broken ones, so every check is shown able to fail.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PYPROJECT = ROOT / "pyproject.toml"

# The python3 package each Debian release ships (packages.debian.org, package
# "python3"): bookworm (12) has 3.11.2-1+b1, trixie (13) has 3.13.5-1.
# Distroless python3-debianN images are built from the same Debian packages, so
# the table holds for both stages. Add a row when a new release is adopted.
DEBIAN_PYTHON = {12: "3.11.2", 13: "3.13.5"}
DEBIAN_CODENAMES = {"bookworm": 12, "trixie": 13}

FUNCTION_PORT = "9443"  # the SDK's default --address is 0.0.0.0:9443
ROOT_USERS = {"root", "0"}
BUILD_TOOLS = re.compile(
    r"(?<![\w.+-])(gcc|g\+\+|clang|build-essential|python3-dev|make)(?![\w.+-])"
)
WHEEL_BUILD = re.compile(
    r"\bpip\s+wheel\b|\bhatch\s+build\b|-m\s+build\b|\buv\s+build\b"
)
WHEEL_INSTALL = re.compile(r"\bpip\s+install\b[^&;|]*\.whl")
PACKAGE_MANAGER = re.compile(r"\b(apt-get|apt|dpkg|apk)\b")


# --- A small Dockerfile parser -------------------------------------------------


@dataclass
class Instruction:
    """One instruction: upper-cased keyword and its arguments, continuations joined."""

    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    """A build stage: its FROM (ARGs substituted) and the instructions after it."""

    index: int
    image: str
    name: str | None
    platform: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def of(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def label(self) -> str:
        return f"stage {self.name or self.index} ({self.image})"


def parse_instructions(text: str) -> list[Instruction]:
    """Split a Dockerfile into instructions.

    Like Docker: comment lines (including parser directives) are dropped, even
    inside a continuation; a trailing backslash joins the next line. Heredocs
    and a non-default ``# escape=`` are not supported (and not used).
    """
    instructions: list[Instruction] = []
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not parts:
            start = number
        if line.endswith("\\"):
            parts.append(line[:-1].strip())
            continue
        parts.append(line)
        keyword, _, args = " ".join(parts).partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
        parts = []
    if parts:
        keyword, _, args = " ".join(parts).partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
    return instructions


def substitute(value: str, variables: Mapping[str, str]) -> str:
    """Expand ``$VAR``, ``${VAR}``, ``${VAR:-default}``; leave unknown names as is."""

    def expand(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("bare")
        if name in variables:
            return variables[name]
        if match.group("default") is not None:
            return match.group("default")
        return match.group(0)

    pattern = r"\$\{(?P<braced>\w+)(?::-(?P<default>[^}]*))?\}|\$(?P<bare>\w+)"
    return re.sub(pattern, expand, value)


def parse_stages(text: str, build_args: Mapping[str, str] | None = None) -> list[Stage]:
    """Group instructions into stages, expanding global ARGs in each FROM line."""
    variables: dict[str, str] = {}
    stages: list[Stage] = []
    for instruction in parse_instructions(text):
        if instruction.keyword == "ARG" and not stages:
            name, _, default = instruction.args.partition("=")
            variables[name.strip()] = default.strip().strip("\"'")
        elif instruction.keyword == "FROM":
            variables.update(build_args or {})
            words = substitute(instruction.args, variables).split()
            flags = [w for w in words if w.startswith("--")]
            rest = [w for w in words if not w.startswith("--")]
            platform = next(
                (f.split("=", 1)[1] for f in flags if f.startswith("--platform=")), None
            )
            name = rest[2] if len(rest) >= 3 and rest[1].upper() == "AS" else None
            stages.append(Stage(len(stages), rest[0] if rest else "", name, platform))
        elif stages:
            stages[-1].instructions.append(instruction)
    return stages


# --- .dockerignore, with Docker's matching rules -------------------------------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Translate one .dockerignore pattern (Go filepath.Match plus ``**``)."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i:]:
            end = pattern.index("]", i)
            out.append(pattern[i : end + 1].replace("[!", "[^"))
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def dockerignore_rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """(excludes?, regex) per pattern, in file order."""
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exclude = not line.startswith("!")
        pattern = line.lstrip("!").strip().strip("/")
        rules.append((exclude, _pattern_regex(pattern)))
    return rules


def is_ignored(path: str, dockerignore: str) -> bool:
    """Whether Docker leaves ``path`` out of the context.

    A pattern matches a path or any of its parent directories; the last
    matching pattern wins, so ``!pattern`` re-includes.
    """
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for exclude, regex in dockerignore_rules(dockerignore):
        if any(regex.fullmatch(candidate) for candidate in candidates):
            ignored = exclude
    return ignored


# --- The checker -----------------------------------------------------------------


def debian_release(image: str) -> int | None:
    """The Debian release of ``debian:N…``, ``debian:codename…``, ``…/…-debianN``."""
    if match := re.search(r"(?:^|/)debian:(\d+|[a-z]+)", image):
        tag = match.group(1)
        return int(tag) if tag.isdigit() else DEBIAN_CODENAMES.get(tag)
    if match := re.search(r"distroless/[\w.-]+-debian(\d+)", image):
        return int(match.group(1))
    return None


def _wheel_installing_stage(stages: list[Stage]) -> Stage | None:
    return next(
        (s for s in stages if any(WHEEL_INSTALL.search(r.args) for r in s.of("RUN"))),
        None,
    )


def _build_stage_problems(build: Stage, final: Stage) -> list[str]:
    problems = []
    build_release, final_release = (
        debian_release(build.image),
        debian_release(final.image),
    )
    if build_release is None or final_release is None:
        problems.append(
            "[same-release] cannot tell the Debian release of "
            f"{build.label()} and/or {final.label()}"
        )
    elif build_release != final_release:
        problems.append(
            f"[same-release] {build.label()} is Debian {build_release} "
            f"(Python {DEBIAN_PYTHON.get(build_release, '?')}) but {final.label()} is "
            f"Debian {final_release} (Python {DEBIAN_PYTHON.get(final_release, '?')}); "
            "a venv built on one cannot import on the other"
        )
    runs = " && ".join(r.args for r in build.of("RUN"))
    if not WHEEL_BUILD.search(runs):
        problems.append(
            f"[wheel] {build.label()} does not build a wheel (pip wheel / hatch build)"
        )
    if not WHEEL_INSTALL.search(runs):
        problems.append(f"[wheel] {build.label()} does not pip install the built .whl")
    return problems


def _final_stage_problems(
    final: Stage, stages: list[Stage], scripts: Mapping[str, str]
) -> list[str]:
    problems = []
    if "distroless" not in final.image and "-slim" not in final.image:
        problems.append(f"[final-image] {final.label()} is neither distroless nor slim")

    users = final.of("USER")
    if not users:
        problems.append(f"[non-root] {final.label()} sets no USER")
    elif users[-1].args.split(":")[0].strip() in ROOT_USERS:
        problems.append(f"[non-root] {final.label()} runs as {users[-1].args!r}")

    ports = {p.split("/")[0] for e in final.of("EXPOSE") for p in e.args.split()}
    if FUNCTION_PORT not in ports:
        problems.append(f"[expose] {final.label()} does not EXPOSE {FUNCTION_PORT}")

    for instruction in final.instructions:
        if instruction.keyword == "RUN" and PACKAGE_MANAGER.search(instruction.args):
            problems.append(
                f"[final-no-build-tools] line {instruction.line}: "
                "package manager in the final stage"
            )
        if BUILD_TOOLS.search(instruction.args):
            problems.append(
                f"[final-no-build-tools] line {instruction.line}: "
                "build tool in the final stage"
            )

    # The venv must be copied from the build stage to the path it was built at:
    # its script shebangs and bin/python3 symlink are absolute paths.
    build_refs = {stages[0].name, str(stages[0].index)}
    venv_dest = None
    for copy in final.of("COPY"):
        words = copy.args.split()
        source = next(
            (w.split("=", 1)[1] for w in words if w.startswith("--from=")), None
        )
        paths = [w for w in words if not w.startswith("--")]
        if source in build_refs and len(paths) == 2:
            if paths[0].rstrip("/") != paths[1].rstrip("/"):
                problems.append(
                    f"[copy-venv] line {copy.line}: {paths[0]} "
                    f"copied to a different path {paths[1]}"
                )
            venv_dest = paths[1].rstrip("/")
    if venv_dest is None:
        problems.append(
            f"[copy-venv] {final.label()} copies no venv from the build stage"
        )

    entrypoints = final.of("ENTRYPOINT")
    if not entrypoints:
        problems.append(f"[entrypoint] {final.label()} has no ENTRYPOINT")
        return problems
    try:
        argv = json.loads(entrypoints[-1].args)
    except json.JSONDecodeError:
        argv = None
    if not isinstance(argv, list) or not argv:
        # Shell form needs /bin/sh, which distroless does not have.
        problems.append(
            f"[entrypoint] ENTRYPOINT must be exec (JSON) form: {entrypoints[-1].args}"
        )
        return problems
    script = argv[0].rsplit("/", 1)[-1]
    if script not in scripts:
        problems.append(
            f"[entrypoint] {argv[0]} is not a [project.scripts] entry "
            f"({sorted(scripts)})"
        )
    if venv_dest is not None and not argv[0].startswith(venv_dest + "/"):
        problems.append(
            f"[entrypoint] {argv[0]} is not inside the copied venv {venv_dest}"
        )
    if argv[1:2] != ["serve"]:
        problems.append(
            f"[entrypoint] ENTRYPOINT does not run the serve subcommand: {argv}"
        )
    return problems


def _python_problems(final: Stage, project: Mapping[str, Any]) -> list[str]:
    release = debian_release(final.image)
    if release is None:
        return []  # already reported as [same-release]
    if release not in DEBIAN_PYTHON:
        message = (
            f"[python-version] Debian {release} is not in DEBIAN_PYTHON; "
            "add the Python version it ships"
        )
        return [message]
    requires = project.get("requires-python")
    if not requires:
        return ["[python-version] pyproject has no requires-python"]
    if not SpecifierSet(requires).contains(DEBIAN_PYTHON[release]):
        message = (
            f"[python-version] Debian {release} ships Python {DEBIAN_PYTHON[release]}, "
            f"outside requires-python {requires!r}"
        )
        return [message]
    return []


def _dockerignore_problems(
    pyproject: Mapping[str, Any], dockerignore: str
) -> list[str]:
    problems = [
        f"[dockerignore] {path} is not excluded from the build context"
        for path in (".git", ".venv")
        if not is_ignored(path, dockerignore)
    ]
    # What the wheel build reads must stay in the context.
    project = pyproject.get("project", {})
    hatch = pyproject.get("tool", {}).get("hatch", {})
    needed = ["pyproject.toml"]
    readme = project.get("readme")
    if isinstance(readme, Mapping):
        readme = readme.get("file")
    if isinstance(readme, str):
        needed.append(readme)
    if version_path := hatch.get("version", {}).get("path"):
        needed.append(version_path)
    needed += [
        f"{p}/__init__.py"
        for p in hatch.get("build", {})
        .get("targets", {})
        .get("wheel", {})
        .get("packages", [])
    ]
    problems += [
        f"[dockerignore] {path} is needed by the wheel build but excluded"
        for path in needed
        if is_ignored(path, dockerignore)
    ]
    return problems


def dockerfile_problems(
    dockerfile_text: str,
    pyproject: Mapping[str, Any],
    dockerignore: str,
    build_args: Mapping[str, str] | None = None,
) -> list[str]:
    """Every broken image property, one ``[key] message`` each; empty when all hold."""
    stages = parse_stages(dockerfile_text, build_args)
    if len(stages) < 2:
        return [
            f"[stages] need a build stage and a runtime stage, found {len(stages)} FROM"
        ]
    build, final = stages[0], stages[-1]
    project = pyproject.get("project", {})
    problems = _build_stage_problems(build, final)
    problems += _final_stage_problems(final, stages, project.get("scripts", {}))
    problems += _python_problems(final, project)
    # Native wheels (grpcio, pydantic-core) must be installed on the
    # target architecture, so the stage that installs them cannot be pinned to the
    # build machine's platform.
    installer = _wheel_installing_stage(stages)
    if (
        installer is not None
        and installer.platform
        and "BUILDPLATFORM" in installer.platform
    ):
        problems.append(
            f"[build-platform] {installer.label()} installs native wheels "
            f"but runs on --platform={installer.platform}"
        )
    problems += _dockerignore_problems(pyproject, dockerignore)
    return problems


def keys(problems: list[str]) -> set[str]:
    return {p.split("]", 1)[0] + "]" for p in problems}


# --- Tests -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real() -> tuple[str, dict[str, Any], str]:
    pyproject = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    return (
        DOCKERFILE.read_text(encoding="utf-8"),
        pyproject,
        DOCKERIGNORE.read_text(encoding="utf-8"),
    )


def test_real_dockerfile_has_no_problems(real):
    assert dockerfile_problems(*real) == []


def test_real_dockerfile_pairs_debian_13_with_python_3_13(real):
    stages = parse_stages(real[0])
    assert [debian_release(s.image) for s in (stages[0], stages[-1])] == [13, 13]
    assert stages[-1].image == "gcr.io/distroless/python3-debian13:nonroot"


BROKEN = """\
# The template's defect: Debian 13 build, Debian 12 runtime, and root on top.
FROM debian:13-slim AS build
RUN apt-get update && apt-get install --yes python3-venv \\
    && python3 -m venv /venv/fn
RUN --mount=target=/src /venv/fn/bin/pip wheel --no-deps -w /dist /src \\
    && /venv/fn/bin/pip install /dist/*.whl
FROM gcr.io/distroless/python3-debian12
COPY --from=build /venv/fn /venv/fn
EXPOSE 9443
USER root
ENTRYPOINT ["/venv/fn/bin/function-cluster-plugin", "serve"]
"""


def test_broken_dockerfile_reports_release_mismatch_and_root_user(real):
    _, pyproject, dockerignore = real
    problems = dockerfile_problems(BROKEN, pyproject, dockerignore)
    assert keys(problems) == {"[same-release]", "[non-root]"}, problems
    mismatch = next(p for p in problems if p.startswith("[same-release]"))
    assert "Debian 13 (Python 3.13.5)" in mismatch
    assert "Debian 12 (Python 3.11.2)" in mismatch


# Each mutation of the real Dockerfile must trip exactly the checks named.
MUTATIONS = [
    pytest.param("EXPOSE 9443", "EXPOSE 8080", "[expose]", id="other-port"),
    pytest.param("USER 65532:65532", "USER 0:0", "[non-root]", id="uid-0"),
    pytest.param("USER 65532:65532", "", "[non-root]", id="no-user"),
    pytest.param('"serve"]', '"run"]', "[entrypoint]", id="no-serve"),
    pytest.param(
        '["/venv/fn/bin/function-cluster-plugin", "serve"]',
        "/venv/fn/bin/function-cluster-plugin serve",
        "[entrypoint]",
        id="shell-form",
    ),
    pytest.param(
        '["/venv/fn/bin/function-cluster-plugin"',
        '["/venv/fn/bin/function"',
        "[entrypoint]",
        id="no-script",
    ),
    pytest.param(
        "COPY --from=build /venv/fn /venv/fn",
        "COPY --from=build /venv/fn /opt/fn",
        "[copy-venv] [entrypoint]",  # the ENTRYPOINT now points outside the venv
        id="moved",
    ),
    pytest.param("pip wheel", "pip download", "[wheel]", id="no-wheel"),
    pytest.param(
        "FROM debian:${DEBIAN_RELEASE}-slim",
        "FROM debian:12-slim",
        "[same-release]",
        id="pinned-12",
    ),
    pytest.param(
        "python3-debian${DEBIAN_RELEASE}:nonroot",
        "python3:nonroot",
        "[same-release]",
        id="untagged",
    ),
    pytest.param(
        "gcr.io/distroless/python3-debian${DEBIAN_RELEASE}:nonroot",
        "debian:${DEBIAN_RELEASE}",
        "[final-image]",
        id="full-debian",
    ),
    pytest.param(
        "ARG DEBIAN_RELEASE=13",
        "ARG DEBIAN_RELEASE=14",
        "[python-version]",
        id="unknown-release",
    ),
    pytest.param(
        "FROM debian:${DEBIAN_RELEASE}-slim AS build",
        "FROM --platform=$BUILDPLATFORM debian:${DEBIAN_RELEASE}-slim AS build",
        "[build-platform]",
        id="buildplatform",
    ),
    pytest.param(
        "WORKDIR /\n",
        "WORKDIR /\nRUN apt-get update && apt-get install -y gcc\n",
        "[final-no-build-tools]",
        id="compiler",
    ),
]


@pytest.mark.parametrize(("old", "new", "expected"), MUTATIONS)
def test_each_check_can_fail(real, old, new, expected):
    dockerfile, pyproject, dockerignore = real
    assert old in dockerfile, f"mutation is stale: {old!r} no longer in the Dockerfile"
    problems = dockerfile_problems(
        dockerfile.replace(old, new), pyproject, dockerignore
    )
    assert keys(problems) == set(expected.split()), problems


def test_requires_python_must_admit_the_runtime_python(real):
    dockerfile, pyproject, dockerignore = real
    narrowed = {
        **pyproject,
        "project": {**pyproject["project"], "requires-python": ">=3.14"},
    }
    assert keys(dockerfile_problems(dockerfile, narrowed, dockerignore)) == {
        "[python-version]"
    }


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param("\n*\n", "\n", id="git-and-venv-in-context"),
        pytest.param("!README.md\n", "", id="readme-excluded"),
        pytest.param("!function\n", "", id="package-excluded"),
        pytest.param(
            "**/*.py[cod]\n", "**/*.py[cod]\nfunction/__version__.py\n", id="version"
        ),
    ],
)
def test_dockerignore_checks_can_fail(real, old, new):
    dockerfile, pyproject, dockerignore = real
    assert old in dockerignore, f"mutation is stale: {old!r} no longer in .dockerignore"
    problems = dockerfile_problems(
        dockerfile, pyproject, dockerignore.replace(old, new)
    )
    assert keys(problems) == {"[dockerignore]"}, problems


def test_single_stage_is_rejected(real):
    _, pyproject, dockerignore = real
    assert keys(
        dockerfile_problems("FROM debian:13-slim\nUSER 1000\n", pyproject, dockerignore)
    ) == {"[stages]"}


def test_parser_joins_continuations_and_drops_comments():
    text = (
        "# syntax=docker/dockerfile:1\n"
        "ARG R=13\n"
        "FROM --platform=$P debian:${R}-slim AS b\n"
        "RUN a \\\n"
        "  # note\n"
        "  && b\n"
    )
    (stage,) = parse_stages(text, {"P": "linux/arm64"})
    assert (stage.image, stage.name, stage.platform) == (
        "debian:13-slim",
        "b",
        "linux/arm64",
    )
    assert [(i.keyword, i.args, i.line) for i in stage.instructions] == [
        ("RUN", "a && b", 4)
    ]


def test_dockerignore_matching_follows_docker_rules(real):
    rules = "*.pyc\n**/*.pyo\ndocs\n*.md\n!README.md\n"
    assert is_ignored("x.pyc", rules)
    assert not is_ignored("function/x.pyc", rules)  # `*` does not cross `/`
    assert is_ignored("function/sub/x.pyo", rules)
    assert is_ignored("docs/a/b.txt", rules)  # a matched directory takes its contents
    assert not is_ignored("README.md", rules)
    assert is_ignored("CHANGELOG.md", rules)
    dockerignore = real[2]
    for path in (
        ".git/HEAD",
        ".venv/bin/python",
        "tests/test_dockerfile.py",
        "scripts/vendor_fixtures.py",
        "benchmarks/new/bench.py",
        "CHANGELOG.md",
        "function/__pycache__/fn.cpython-313.pyc",
        "function/addons/__pycache__/x.cpython-313.pyc",
    ):
        assert is_ignored(path, dockerignore), path
    for path in (
        "pyproject.toml",
        "README.md",
        "function/__version__.py",
        "function/addons/x.py",
        "function/data/PROVENANCE.md",  # package data: *.md elsewhere is no reason
    ):
        assert not is_ignored(path, dockerignore), path
