"""The README's install checklist, read as a user reads it: its steps, commands and snippets.

Its details (what each step does, the ways around it) are a page of the docs site,
``docs/installing.md``. The unit tests hold its steps to the release, the CLI and the packages
(``tests/test_docs.py``, ``tests/test_release.py``); the end-to-end install test
(``e2e/controlplane/test_install*.py``) applies what its steps apply against a real control plane.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CHECKLIST = "## Install on a cluster"
# The checklist's details: the README links to them.
INSTALLING = ROOT / "docs" / "installing.md"
DETAILS = "## Installing in detail"
# A release's install folder as a checklist command names it, and what follows it.
RELEASE_INSTALL = re.compile(r"dist/release/(?P<version>[^/\s]+)/install/(?P<path>[^\s'\"]*)")
_STEP = re.compile(r"^(\d+)\. ", re.M)
_GET = re.compile(r"kubectl get (configuration[\w,]*)")


def section(heading: str, path: Path = README) -> str:
    """The ``## heading`` section of ``path`` (the README), up to the next ``## `` heading."""
    text = path.read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n") + 1
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


def checklist() -> str:
    """The numbered install checklist."""
    return section(CHECKLIST)


def quick_start() -> str:
    """The checklist and its details (the release, the providers, air-gapped clusters)."""
    return checklist() + section(DETAILS, INSTALLING)


def _blocks(text: str, language: str) -> list[str]:
    found = re.findall(rf"^( *)```{language}\n(.*?)^\1```", text, re.S | re.M)
    return [textwrap.dedent(body) for _, body in found]


def yaml_blocks(text: str) -> list[dict[str, Any]]:
    """Every object of the text's ```yaml blocks."""
    return [d for body in _blocks(text, "yaml") for d in yaml.safe_load_all(body) if d]


def shell_lines(text: str) -> list[str]:
    """The command lines of the text's ```sh blocks (continued lines joined, comments cut)."""
    lines = []
    for body in _blocks(text, "sh"):
        for raw in body.replace("\\\n", " ").splitlines():
            line = raw.strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def steps() -> list[tuple[int, str]]:
    """(number, text) of each checklist step, in order; the last ends with its code block."""
    text = checklist()
    found = list(_STEP.finditer(text))
    out = []
    for n, m in enumerate(found):
        if n + 1 < len(found):
            end = found[n + 1].start()
        else:
            fence = text.index("```", text.index("```", m.end()) + 3)
            end = text.index("\n", fence)
        out.append((int(m.group(1)), text[m.start() : end]))
    return out


def step_commands() -> list[list[str]]:
    """The command lines of each step's ```sh block."""
    return [shell_lines(body) for _, body in steps()]


def install_commands() -> tuple[list[str], list[str]]:
    """(what the checklist's ``kubectl apply -f`` commands take from the release's ``install/``
    folder, in order, as paths below it; the package kinds it lists with ``kubectl get``)."""
    text = checklist()
    applied = []
    for line in shell_lines(text):
        for command in re.split(r"\s*(?:&&|\|)\s*", line):
            if command.startswith("kubectl apply"):
                applied += [m.group("path") for m in RELEASE_INSTALL.finditer(command)]
    listed = [kind for kinds in _GET.findall(text) for kind in kinds.split(",")]
    return applied, listed
