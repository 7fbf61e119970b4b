"""Kubernetes objects from the YAML files a command is given, and the step input in them.

``render``, ``simulate``, ``issuer`` and ``aws`` read their XR, cluster objects and
step input the same way: YAML or JSON files, or directories of them, as
``kubectl get -o yaml`` prints them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from function.flavour import composite_mismatch

# What the shipped Compositions call: the name Crossplane gives the function package
# (xpkg.crossplane.io/function-cluster-plugin/function-cluster-plugin) when a Configuration
# installs it. A Function installed by hand under the package's own name is found too.
FUNCTION_NAME = "function-cluster-plugin-function-cluster-plugin"
FUNCTION_NAMES = frozenset({FUNCTION_NAME, "function-cluster-plugin"})
DEFAULT_STEP = "cluster-plugin"  # the step name in apis/*/composition.yaml
YAML_SUFFIXES = (".yaml", ".yml", ".json")


class InputFileError(Exception):
    """A file given to a command cannot be read or does not fit."""


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.is_file() and p.suffix in YAML_SUFFIXES)
    if path.is_file():
        return [path]
    msg = f"{path}: no such file or directory"
    raise InputFileError(msg)


def load_documents(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every object in the YAML streams at ``paths`` (files, or directories of *.yaml/*.yml/*.json).

    Empty documents are skipped and ``kind: List`` objects are expanded, so
    ``kubectl get -o yaml`` output can be used as is.
    """
    out: list[dict[str, Any]] = []
    for p in paths:
        for f in _files(Path(p)):
            try:
                docs = list(yaml.safe_load_all(f.read_text()))
            except yaml.YAMLError as err:
                msg = f"{f}: not valid YAML: {err}"
                raise InputFileError(msg) from None
            for doc in docs:
                if doc is None:
                    continue
                if not isinstance(doc, dict):
                    msg = (
                        f"{f}: every document must be a Kubernetes object, got {type(doc).__name__}"
                    )
                    raise InputFileError(msg)
                if doc.get("kind") == "List" and isinstance(doc.get("items"), list):
                    out.extend(i for i in doc["items"] if isinstance(i, dict))
                else:
                    out.append(doc)
    return out


def load_one(path: str | Path, what: str) -> dict[str, Any]:
    """The single object in ``path``."""
    docs = load_documents([path])
    if len(docs) != 1:
        msg = f"{path}: expected exactly one {what}, found {len(docs)} objects"
        raise InputFileError(msg)
    return docs[0]


def _composition_step(
    docs: Sequence[dict[str, Any]], source: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the Composition, its first pipeline step that calls this function)."""
    comps = [d for d in docs if d.get("kind") == "Composition"]
    if not comps:
        msg = f"{source}: no Composition found"
        raise InputFileError(msg)
    for comp in comps:
        for step in comp.get("spec", {}).get("pipeline", None) or []:
            if (step.get("functionRef") or {}).get("name") in FUNCTION_NAMES:
                return comp, step
    msg = f"{source}: no pipeline step has functionRef.name {' or '.join(sorted(FUNCTION_NAMES))}"
    raise InputFileError(msg)


def step_from_composition(
    docs: Sequence[dict[str, Any]], source: str = "the Composition"
) -> tuple[str, dict[str, Any]]:
    """(step name, input) of the first pipeline step that calls this function (FUNCTION_NAMES)."""
    _, step = _composition_step(docs, source)
    return str(step.get("step") or DEFAULT_STEP), dict(step.get("input") or {})


def step_input(
    input_file: str | Path | None,
    composition: str | Path | None,
    xr: Mapping[str, Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    """(step name, step input) from ``input_file``, else ``composition``, else the defaults.

    With ``xr`` the Composition must be for its kind: the legacy and namespaced
    Compositions compose different kinds of resources.
    """
    name, found = DEFAULT_STEP, {}
    if composition:
        comp, step = _composition_step(load_documents([composition]), str(composition))
        name, found = str(step.get("step") or DEFAULT_STEP), dict(step.get("input") or {})
        if xr is not None:
            problem = composite_mismatch(xr, (comp.get("spec") or {}).get("compositeTypeRef"))
            if problem:
                msg = f"{composition}: {problem}"
                raise InputFileError(msg)
    if input_file:
        found = load_one(input_file, "step input")
    return name, found
