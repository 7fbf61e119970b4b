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

from function import accept
from function.flavour import composite_mismatch
from function.spec_base import InvalidInputError
from function.step_input import INPUT_API_VERSION, INPUT_KIND
from function_tools import resolve

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


def _text(f: Path) -> str:
    try:
        raw = f.read_bytes()
    except OSError as err:
        msg = f"{f}: cannot be read: {err.strerror or err}"
        raise InputFileError(msg) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        msg = (
            f"{f}: not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start}): give a "
            "YAML or JSON file of Kubernetes objects"
        )
        raise InputFileError(msg) from None


def read_text(path: str | Path) -> str:
    """A file's UTF-8 text, or an InputFileError naming the file and why not."""
    return _text(Path(path))


def yaml_error(f: Path, err: yaml.YAMLError) -> InputFileError:
    """One line: what is wrong and where (PyYAML's own text spans several)."""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return InputFileError(f"{f}: not valid YAML or JSON: {problem}{where}")


def _load(paths: Iterable[str | Path], *, objects: bool) -> tuple[list[dict[str, Any]], list[Path]]:
    """(every document at ``paths``, the file each came from).

    ``objects``: each must be a Kubernetes object (``accept.kubernetes_object_problem``);
    otherwise only a mapping (the XR and the step input are judged by ``accept``).
    """
    out: list[dict[str, Any]] = []
    sources: list[Path] = []
    for p in paths:
        for f in _files(Path(p)):
            try:
                docs = list(yaml.safe_load_all(_text(f)))
            except yaml.YAMLError as err:
                raise yaml_error(f, err) from None
            for n, doc in enumerate(docs, start=1):
                if doc is None:
                    continue
                where = f"{f} (document {n})" if len(docs) > 1 else str(f)
                items: list[Any] = [doc]
                if isinstance(doc, dict) and doc.get("kind") == "List":
                    listed = doc.get("items")
                    items = listed if isinstance(listed, list) else []
                for i, item in enumerate(items):
                    problem = (
                        accept.kubernetes_object_problem(item)
                        if objects or not isinstance(item, dict)
                        else None
                    )
                    if problem:
                        which = f" items[{i}]" if item is not doc else ""
                        msg = f"{where}{which}: {problem}"
                        raise InputFileError(msg)
                out += items
                sources += [f] * len(items)
    return out, sources


def load_documents(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every object in the YAML streams at ``paths`` (files, or directories of *.yaml/*.yml/*.json).

    Empty documents are skipped and ``kind: List`` objects are expanded, so
    ``kubectl get -o yaml`` output can be used as is. A file that is not UTF-8, not
    YAML or JSON, or holds anything but Kubernetes objects is an InputFileError.
    """
    return _load(paths, objects=True)[0]


def load_required(
    paths: Iterable[str | Path], xr: Mapping[str, Any], step_input: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """The cluster objects at ``paths`` (``--required``), judged against the XR (``accept``).

    An object of another cluster, or of this cluster in an apiVersion the function
    does not ask for, is an InputFileError naming its file. An XR the function refuses
    is left for the command to report as the function does.
    """
    docs, sources = _load(paths, objects=True)
    try:
        accepted = accept.accept_xr_object(xr, step_input)
    except InvalidInputError:
        return docs
    problem = resolve.given_object_problem(accepted, docs)
    if problem is not None:
        index, why = problem
        msg = f"{sources[index]}: {why}"
        raise InputFileError(msg)
    return docs


def load_one(path: str | Path, what: str) -> dict[str, Any]:
    """The single object in ``path`` (a mapping: what it must hold, ``accept`` judges)."""
    docs = _load([path], objects=False)[0]
    if len(docs) != 1:
        msg = f"{path}: expected exactly one {what}, found {len(docs)} objects"
        raise InputFileError(msg)
    return docs[0]


def _carries_our_input(step: Mapping[str, Any]) -> bool:
    found = step.get("input")
    return (
        isinstance(found, Mapping)
        and found.get("apiVersion") == INPUT_API_VERSION
        and found.get("kind") == INPUT_KIND
    )


def _step_label(composition: Mapping[str, Any], index: int, step: Mapping[str, Any]) -> str:
    name = (composition.get("metadata") or {}).get("name") or "(unnamed)"
    return f"Composition {name} spec.pipeline[{index}] (step {step.get('step')!r})"


def function_step(
    docs: Sequence[dict[str, Any]], source: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the Composition, its pipeline step whose input is this function's Input).

    The step is known by its input's type, not by the Function's name: Crossplane names a
    Function it installs as a dependency after the registry path it came from, so the
    name differs from one registry to the next.
    """
    comps = [d for d in docs if d.get("kind") == "Composition"]
    if not comps:
        msg = f"{source}: no Composition found"
        raise InputFileError(msg)
    ours = [
        (comp, index, step)
        for comp in comps
        for index, step in enumerate((comp.get("spec") or {}).get("pipeline") or [])
        if isinstance(step, dict) and _carries_our_input(step)
    ]
    wanted = f"input with apiVersion: {INPUT_API_VERSION} and kind: {INPUT_KIND}"
    if not ours:
        msg = (
            f"{source}: no pipeline step has an {wanted} (this function's step input; a step "
            f"that calls the function without input needs at least those two fields)"
        )
        raise InputFileError(msg)
    if len(ours) > 1:
        labels = ", ".join(_step_label(comp, index, step) for comp, index, step in ours)
        msg = f"{source}: {len(ours)} pipeline steps have an {wanted}: {labels}; keep exactly one"
        raise InputFileError(msg)
    comp, _, step = ours[0]
    return comp, step


def step_from_composition(
    docs: Sequence[dict[str, Any]], source: str = "the Composition"
) -> tuple[str, dict[str, Any]]:
    """(step name, input) of the pipeline step whose input is this function's Input."""
    _, step = function_step(docs, source)
    return _name_and_input(step)


def _name_and_input(step: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    return str(step.get("step") or DEFAULT_STEP), dict(step["input"])


def step_input(
    input_file: str | Path | None,
    composition: str | Path | None,
    xr: Mapping[str, Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    """(step name, step input) from ``input_file``, else ``composition``, else the defaults.

    With ``xr`` the Composition must be for its kind: the legacy and namespaced
    Compositions compose different kinds of resources.
    """
    name: str = DEFAULT_STEP
    found: dict[str, Any] = {}
    if composition:
        comp, step = function_step(load_documents([composition]), str(composition))
        name, found = _name_and_input(step)
        if xr is not None:
            problem = composite_mismatch(xr, (comp.get("spec") or {}).get("compositeTypeRef"))
            if problem:
                msg = f"{composition}: {problem}"
                raise InputFileError(msg)
    if input_file:
        found = load_one(input_file, "step input")
    return name, found
