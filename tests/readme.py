"""The README's quick start, read as a user reads it: its YAML snippets and shell commands.

The unit tests hold its snippets to the CRDs and packages; the end-to-end install test
(``e2e/controlplane/test_install*.py``) runs its commands against a real control plane.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import yaml

README = Path(__file__).resolve().parent.parent / "README.md"
QUICK_START = "## Quick start on a cluster"
QUICK_START_END = "## Try it without a cluster"
INSTALL_FOLDER = "cd dist/release/<version>/install"
# `kubectl apply -f FILE`, possibly offered as an alternative (`# or: kubectl apply -f FILE`).
_APPLY = re.compile(r"^\s*(?:# or: )?kubectl apply -f (\S+)", re.M)
_GET = re.compile(r"^\s*kubectl get (\S+)", re.M)


def quick_start() -> str:
    """The README's quick start section."""
    text = README.read_text(encoding="utf-8")
    return text[text.index(QUICK_START) : text.index(QUICK_START_END)]


def _blocks(section: str, language: str) -> list[str]:
    found = re.findall(rf"^( *)```{language}\n(.*?)^\1```", section, re.S | re.M)
    return [textwrap.dedent(body) for _, body in found]


def yaml_blocks(section: str) -> list[dict[str, Any]]:
    """Every object of the section's ```yaml blocks."""
    return [d for body in _blocks(section, "yaml") for d in yaml.safe_load_all(body) if d]


def install_commands() -> tuple[list[str], list[str]]:
    """(files applied, kinds listed) by the quick start's install step, in its order.

    The step's shell block starts in the release's ``install/`` folder; a file offered as an
    alternative (``# or: kubectl apply -f ...``) is listed too.
    """
    (block,) = [b for b in _blocks(quick_start(), "sh") if INSTALL_FOLDER in b]
    listed = [kind for kinds in _GET.findall(block) for kind in kinds.split(",")]
    return _APPLY.findall(block), listed
