"""Validate Kubernetes objects against the real CRD schemas vendored in tests/fixtures/.

This is the project's main test guard. It mimics what the API server does on *create*:

1. Look the CRD up by ``apiVersion`` (group/version) and ``kind``; the version must
   be served.
2. Check scope (cluster-scoped kinds must not set ``metadata.namespace``) and the
   basic ``metadata`` rules (DNS-subdomain ``name``, qualified label/annotation keys,
   label values).
3. Validate the object against the version's ``openAPIV3Schema`` converted to JSON
   Schema: ``nullable``, ``x-kubernetes-int-or-string``,
   ``x-kubernetes-preserve-unknown-fields``, ``x-kubernetes-embedded-resource``,
   ``x-kubernetes-list-type`` (set/map uniqueness). Objects with ``properties``
   reject unknown fields (the API server would prune or reject them).
4. Evaluate every ``x-kubernetes-validations`` CEL rule with cel-python at the node
   it is attached to, on a copy of the object with null fields dropped and schema
   defaults applied (as the API server does before validating). Transition rules
   (``oldSelf``) are skipped, since only creates are validated.

Helm values are validated with :func:`validate_values` against the
``values.schema.json`` inside a vendored chart package (``tests/fixtures/charts/*.tgz`` and
``tests/fixtures/older-charts/*.tgz``, the same packages ``tests/test_helm.py`` renders with
helm).

Public API::

    REGISTRY, get_registry()
    validate(obj) -> list[str]
    validate_with_schema(obj, openapi_v3_schema) -> list[str]
    validate_values(chart, values, version=None) -> list[str]
    vendored_charts(), chart_archive(chart, version), chart_file(archive, name)
    assert_valid(obj)  # raises AssertionError listing the errors
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import tarfile
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import yaml
from celpy import celtypes
from jsonschema.exceptions import ValidationError, best_match

__all__ = [
    "CHART_DIR",
    "CHART_DIRS",
    "CRD_DIR",
    "OLDER_CHART_DIR",
    "REGISTRY",
    "UNSUPPORTED_RULES",
    "CRDRegistry",
    "CRDVersion",
    "CompiledSchema",
    "assert_valid",
    "cel_escape",
    "chart_archive",
    "chart_file",
    "get_registry",
    "has_values_schema",
    "validate",
    "validate_values",
    "validate_with_schema",
    "vendored_charts",
]

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CRD_DIR = FIXTURES / "crds"
CHART_DIR = FIXTURES / "charts"
# Older chart versions fetched from upstream for the per-minor defaults and the upgrade
# tests (their own PROVENANCE.md and SHA256SUMS): not a copy of ../shared, so apart from
# CHART_DIR, which `make vendor-check` compares with it.
OLDER_CHART_DIR = FIXTURES / "older-charts"
CHART_DIRS = (CHART_DIR, OLDER_CHART_DIR)

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# ------------------------------------------------------------------------------------
# metadata checks (apimachinery validation, simplified)
# ------------------------------------------------------------------------------------

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_RE = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL)
_QUALIFIED_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_TOTAL_ANNOTATION_SIZE = 256 * 1024


def _dns_subdomain_errors(value: str, what: str) -> list[str]:
    errors = []
    if len(value) > 253:
        errors.append(f"{what}: must be no more than 253 characters (got {len(value)})")
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errors.append(
            f"{what}: {value!r} is not a valid DNS-1123 subdomain (lowercase "
            "alphanumerics, '-' and '.', starting and ending with an alphanumeric)"
        )
    return errors


def _qualified_name_errors(key: str, what: str) -> list[str]:
    parts = key.split("/")
    if len(parts) > 2:
        return [f"{what}: key {key!r} must be a qualified name ([prefix/]name)"]
    name = parts[-1]
    errors = []
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append(f"{what}: key {key!r} has an empty prefix")
        else:
            errors.extend(
                _dns_subdomain_errors(prefix, f"{what}: prefix of key {key!r}")
            )
    if not name or len(name) > 63 or not _QUALIFIED_NAME_RE.fullmatch(name):
        errors.append(
            f"{what}: name part of key {key!r} must be 1-63 characters of "
            "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        )
    return errors


def _metadata_errors(meta: Any) -> list[str]:
    """Check ObjectMeta fields like apimachinery does (types are left to the schema)."""
    if not isinstance(meta, dict):
        return []
    errors: list[str] = []
    name = meta.get("name")
    if isinstance(name, str):
        if not name:
            errors.append("metadata.name: must not be empty")
        else:
            errors.extend(_dns_subdomain_errors(name, "metadata.name"))
    generate_name = meta.get("generateName")
    if isinstance(generate_name, str) and generate_name:
        # apimachinery validates the prefix with a trailing '-' masked out.
        prefix = generate_name.removesuffix("-") or "a"
        errors.extend(_dns_subdomain_errors(prefix, "metadata.generateName"))
    namespace = meta.get("namespace")
    if isinstance(namespace, str):
        if len(namespace) > 63 or not _DNS1123_LABEL_RE.fullmatch(namespace):
            errors.append(
                f"metadata.namespace: {namespace!r} is not a valid DNS-1123 label "
                "(at most 63 lowercase alphanumerics or '-')"
            )
    labels = meta.get("labels")
    if isinstance(labels, dict):
        for key, value in labels.items():
            errors.extend(_qualified_name_errors(str(key), "metadata.labels"))
            if isinstance(value, str) and (
                len(value) > 63 or not _LABEL_VALUE_RE.fullmatch(value)
            ):
                errors.append(
                    f"metadata.labels[{key}]: value {value!r} must be at most 63 "
                    "characters of alphanumerics, '-', '_' or '.', starting and ending "
                    "with an alphanumeric"
                )
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        size = 0
        for key, value in annotations.items():
            errors.extend(
                _qualified_name_errors(str(key).lower(), "metadata.annotations")
            )
            size += len(str(key)) + (len(value) if isinstance(value, str) else 0)
        if size > _TOTAL_ANNOTATION_SIZE:
            errors.append(
                f"metadata.annotations: total size {size} exceeds "
                f"{_TOTAL_ANNOTATION_SIZE} bytes"
            )
    return errors


_STRING = {"type": "string"}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_OBJECT_META_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": _STRING,
        "generateName": _STRING,
        "namespace": _STRING,
        "selfLink": _STRING,
        "uid": _STRING,
        "resourceVersion": _STRING,
        "generation": {"type": "integer"},
        "creationTimestamp": {"type": ["string", "null"]},
        "deletionTimestamp": {"type": ["string", "null"]},
        "deletionGracePeriodSeconds": {"type": "integer"},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
        "finalizers": {"type": "array", "items": _STRING},
        "managedFields": {"type": "array", "items": {"type": "object"}},
        "ownerReferences": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["apiVersion", "kind", "name", "uid"],
                "properties": {
                    "apiVersion": _STRING,
                    "kind": _STRING,
                    "name": _STRING,
                    "uid": _STRING,
                    "controller": {"type": "boolean"},
                    "blockOwnerDeletion": {"type": "boolean"},
                },
            },
        },
    },
}

# ------------------------------------------------------------------------------------
# openAPIV3Schema -> JSON Schema
# ------------------------------------------------------------------------------------

# Keywords copied verbatim (value validations understood by jsonschema the same way).
_COPIED_KEYWORDS = (
    "type",
    "enum",
    "pattern",
    "maxLength",
    "minLength",
    "maximum",
    "minimum",
    "multipleOf",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxProperties",
    "minProperties",
    "required",
    "format",
)
_MAP_KEYS_KEYWORD = "x-k8s-list-map-keys"


def _openapi_to_jsonschema(
    node: Mapping[str, Any], *, structural: bool = True
) -> dict[str, Any]:
    """Convert one openAPIV3Schema node (recursively) to JSON Schema.

    ``structural`` is False inside ``allOf``/``anyOf``/``oneOf``/``not``: those are pure
    value validations in Kubernetes, so they must not forbid additional properties.
    """
    out: dict[str, Any] = {k: node[k] for k in _COPIED_KEYWORDS if k in node}
    # OpenAPI 3.0 boolean exclusive bounds -> JSON Schema numeric ones.
    for bound, exclusive in (
        ("maximum", "exclusiveMaximum"),
        ("minimum", "exclusiveMinimum"),
    ):
        if node.get(exclusive) is True and bound in out:
            out[exclusive] = out.pop(bound)

    props = node.get("properties")
    if props:
        out["properties"] = {k: _openapi_to_jsonschema(v) for k, v in props.items()}
    additional = node.get("additionalProperties")
    if isinstance(additional, Mapping):
        out["additionalProperties"] = _openapi_to_jsonschema(additional)
    elif isinstance(additional, bool):
        out["additionalProperties"] = additional
    items = node.get("items")
    if isinstance(items, Mapping):
        out["items"] = _openapi_to_jsonschema(items)
    for junctor in ("allOf", "anyOf", "oneOf"):
        if node.get(junctor):
            out[junctor] = [
                _openapi_to_jsonschema(s, structural=False) for s in node[junctor]
            ]
    if isinstance(node.get("not"), Mapping):
        out["not"] = _openapi_to_jsonschema(node["not"], structural=False)

    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
        # The usual companion anyOf [{type: integer}, {type: string}] is now redundant.
        if all(set(s) == {"type"} for s in out.get("anyOf", [])):
            out.pop("anyOf", None)
    if node.get("x-kubernetes-embedded-resource"):
        embedded = out.setdefault("properties", {})
        embedded.setdefault("apiVersion", dict(_STRING))
        embedded.setdefault("kind", dict(_STRING))
        embedded.setdefault("metadata", _OBJECT_META_SCHEMA)
        out["required"] = sorted({*out.get("required", ()), "apiVersion", "kind"})
    if (
        structural
        and "properties" in out
        and "additionalProperties" not in out
        and not preserve
    ):
        out["additionalProperties"] = False

    list_type = node.get("x-kubernetes-list-type")
    if list_type == "set":
        out["uniqueItems"] = True
    elif list_type == "map" and node.get("x-kubernetes-list-map-keys"):
        out[_MAP_KEYS_KEYWORD] = list(node["x-kubernetes-list-map-keys"])

    if node.get("nullable") is True:
        if "type" in out:
            types = out["type"] if isinstance(out["type"], list) else [out["type"]]
            out["type"] = [*types, "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    return out


def _root_jsonschema(openapi_v3_schema: Mapping[str, Any]) -> dict[str, Any]:
    """Convert a root openAPIV3Schema; apiVersion/kind/metadata are always allowed."""
    out = _openapi_to_jsonschema(openapi_v3_schema)
    props = out.setdefault("properties", {})
    props["apiVersion"] = dict(_STRING)
    props["kind"] = dict(_STRING)
    props["metadata"] = _OBJECT_META_SCHEMA
    if "additionalProperties" not in out and not openapi_v3_schema.get(
        "x-kubernetes-preserve-unknown-fields"
    ):
        out["additionalProperties"] = False
    out.setdefault("type", "object")
    return out


def _list_map_keys(
    validator: Any, keys: list[str], instance: Any, _schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """``x-kubernetes-list-type: map``: entries must be unique by their map keys."""
    if not validator.is_type(instance, "array"):
        return
    seen: dict[str, int] = {}
    for index, item in enumerate(instance):
        if not isinstance(item, dict):
            continue
        key = json.dumps([item.get(k) for k in keys], sort_keys=True)
        if key in seen:
            shown = ", ".join(f"{k}={item.get(k)!r}" for k in keys)
            yield ValidationError(
                f"duplicate entry in list-type map ({shown}): "
                f"items {seen[key]} and {index}"
            )
        else:
            seen[key] = index


def _is_datetime(value: object) -> bool:
    if not isinstance(value, str):
        return True
    return bool(
        re.fullmatch(
            r"\d{4}-\d{2}-\d{2}"
            r"([Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})?)?",
            value,
        )
    )


def _is_base64(value: object) -> bool:
    if not isinstance(value, str):
        return True
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


# Formats are handled loosely: only date-time and byte strings are checked (as the API
# server's strfmt registry does); int32/int64 and unknown formats are annotations.
_FORMAT_CHECKER = jsonschema.FormatChecker(formats=())
_FORMAT_CHECKER.checks("date-time")(_is_datetime)
_FORMAT_CHECKER.checks("byte")(_is_base64)

_K8sValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {_MAP_KEYS_KEYWORD: _list_map_keys}
)


def _format_path(parts: Any) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$-]*", str(part)):
            out += f".{part}" if out else str(part)
        else:
            out += f"[{part}]"
    return out or "<root>"


def _schema_error_messages(validator: Any, instance: Any) -> list[str]:
    messages = []
    for error in validator.iter_errors(instance):
        shown = error
        if error.context:  # anyOf/oneOf: report the most relevant branch failure too
            inner = best_match(error.context)
            shown = inner if inner is not None else error
        text = shown.message
        if shown.validator == "type" and shown.instance is None:
            text = (
                "null is not allowed: the field is not nullable "
                f"(expected {shown.validator_value}); omit it instead"
            )
        if len(text) > 300:
            text = text[:300] + "..."
        messages.append(f"{_format_path(shown.absolute_path)}: {text}")
    return sorted(set(messages))


# ------------------------------------------------------------------------------------
# CEL rules: x-kubernetes-validations
# ------------------------------------------------------------------------------------

# Kubernetes escapes property names that are CEL reserved words (namespace becomes
# __namespace__) and the characters '__', '.', '-', '/' in property names.
_CEL_RESERVED = frozenset(
    {
        "true", "false", "null", "in", "as", "break", "const", "continue", "else",
        "for", "function", "if", "import", "let", "loop", "package", "namespace",
        "return", "var", "void", "while",
    }
)  # fmt: skip
_CEL_ESCAPABLE_RE = re.compile(r"[a-zA-Z_.\-/][a-zA-Z0-9_.\-/]*")


def cel_escape(name: str) -> str:
    """Return the CEL identifier Kubernetes exposes a schema property under."""
    if name in _CEL_RESERVED:
        return f"__{name}__"
    if not _CEL_ESCAPABLE_RE.fullmatch(name):
        return name  # not accessible from CEL in Kubernetes either
    return (
        name.replace("__", "__underscores__")
        .replace(".", "__dot__")
        .replace("-", "__dash__")
        .replace("/", "__slash__")
    )


def _cel_str(value: Any) -> str:
    if not isinstance(value, str):
        msg = f"expected a string, got {type(value).__name__}"
        raise TypeError(msg)
    return value


# Kubernetes CEL string extensions (cel-go ext.Strings) that cel-python lacks.
def _lower_ascii(s: Any) -> celtypes.StringType:
    return celtypes.StringType(
        _cel_str(s).translate(
            str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
        )
    )


def _upper_ascii(s: Any) -> celtypes.StringType:
    return celtypes.StringType(
        _cel_str(s).translate(
            str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
        )
    )


def _trim(s: Any) -> celtypes.StringType:
    return celtypes.StringType(_cel_str(s).strip())


def _split(s: Any, sep: Any, limit: Any = -1) -> celtypes.ListType:
    text, sep, limit = _cel_str(s), _cel_str(sep), int(limit)
    if limit == 0:
        return celtypes.ListType([])
    if sep == "":
        parts = list(text) if limit < 0 else [*text[: limit - 1], text[limit - 1 :]]
    else:
        parts = text.split(sep) if limit < 0 else text.split(sep, limit - 1)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def _replace(s: Any, old: Any, new: Any, limit: Any = -1) -> celtypes.StringType:
    return celtypes.StringType(
        _cel_str(s).replace(_cel_str(old), _cel_str(new), int(limit))
    )


def _index_of(target: Any, item: Any, offset: Any = 0) -> celtypes.IntType:
    if isinstance(target, list):  # Kubernetes lists library: list.indexOf(x)
        for i, x in enumerate(target):
            if x == item:
                return celtypes.IntType(i)
        return celtypes.IntType(-1)
    text, sub, offset = _cel_str(target), _cel_str(item), int(offset)
    if offset < 0 or offset > len(text):
        msg = f"index out of range: {offset}"
        raise ValueError(msg)
    return celtypes.IntType(text.find(sub, offset))


def _last_index_of(target: Any, item: Any, offset: Any = None) -> celtypes.IntType:
    if isinstance(target, list):
        for i in range(len(target) - 1, -1, -1):
            if target[i] == item:
                return celtypes.IntType(i)
        return celtypes.IntType(-1)
    text, sub = _cel_str(target), _cel_str(item)
    end = len(text) if offset is None else int(offset) + len(sub)
    return celtypes.IntType(text.rfind(sub, 0, end))


def _substring(s: Any, start: Any, end: Any = None) -> celtypes.StringType:
    text, begin = _cel_str(s), int(start)
    stop = len(text) if end is None else int(end)
    if not 0 <= begin <= stop <= len(text):
        msg = f"substring out of range: [{begin}:{stop}] of length {len(text)}"
        raise ValueError(msg)
    return celtypes.StringType(text[begin:stop])


def _char_at(s: Any, index: Any) -> celtypes.StringType:
    text, i = _cel_str(s), int(index)
    if not 0 <= i <= len(text):
        msg = f"index out of range: {i}"
        raise ValueError(msg)
    return celtypes.StringType(text[i : i + 1])


def _join(items: Any, sep: Any = "") -> celtypes.StringType:
    return celtypes.StringType(_cel_str(sep).join(_cel_str(x) for x in items))


def _reverse(s: Any) -> celtypes.StringType:
    return celtypes.StringType(_cel_str(s)[::-1])


class _OptionalNone:
    """``oldSelf`` of ``optionalOldSelf: true`` rules on create (an empty optional)."""

    def __repr__(self) -> str:
        return "optional.none()"


_OPTIONAL_NONE = _OptionalNone()


def _has_value(opt: Any) -> celtypes.BoolType:
    return celtypes.BoolType(not isinstance(opt, _OptionalNone))


def _or_value(opt: Any, default: Any) -> Any:
    return default if isinstance(opt, _OptionalNone) else opt


def _opt_value(opt: Any) -> Any:
    if isinstance(opt, _OptionalNone):
        msg = "optional.none() dereference"
        raise ValueError(msg)
    return opt


CEL_EXTENSION_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "lowerAscii": _lower_ascii,
    "upperAscii": _upper_ascii,
    "trim": _trim,
    "split": _split,
    "replace": _replace,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "substring": _substring,
    "charAt": _char_at,
    "join": _join,
    "reverse": _reverse,
    # optionals, only as far as optionalOldSelf rules need them on create
    "hasValue": _has_value,
    "orValue": _or_value,
    "value": _opt_value,
}
# cel-python 0.5.0 already has startsWith, endsWith, matches (RE2), contains, size,
# duration, timestamp and the all/exists/exists_one/map/filter macros; add the string
# ones only if the installed version lacks them.
for _name, _impl in (
    ("startsWith", lambda s, p: celtypes.BoolType(_cel_str(s).startswith(_cel_str(p)))),
    ("endsWith", lambda s, p: celtypes.BoolType(_cel_str(s).endswith(_cel_str(p)))),
    (
        "matches",
        lambda s, p: celtypes.BoolType(re.search(_cel_str(p), _cel_str(s)) is not None),
    ),
):
    if _name not in celpy.evaluation.base_functions:
        CEL_EXTENSION_FUNCTIONS[_name] = _impl


@lru_cache(maxsize=1)
def _cel_env() -> celpy.Environment:
    return celpy.Environment()


_OLD_SELF_RE = re.compile(r"\boldSelf\b")


@dataclass(frozen=True)
class _CelProgram:
    text: str
    program: Any = None
    error: str | None = None


@cache
def _compile_cel(text: str) -> _CelProgram:
    env = _cel_env()
    try:
        program = env.program(env.compile(text), functions=CEL_EXTENSION_FUNCTIONS)
    except Exception as exc:  # any parser failure makes the rule unsupported
        return _CelProgram(text, error=f"{type(exc).__name__}: {exc}")
    return _CelProgram(text, program=program)


UNSUPPORTED_RULES: dict[str, str] = {}
"""CEL rules cel-python cannot compile (rule -> error); skipped with a warning."""


@dataclass(frozen=True)
class _Rule:
    rule: str
    message: str | None
    message_expression: str | None
    reason: str | None
    field_path: str | None
    transition: bool
    optional_old_self: bool

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> _Rule:
        rule = str(spec.get("rule", ""))
        return cls(
            rule=rule,
            message=spec.get("message"),
            message_expression=spec.get("messageExpression"),
            reason=spec.get("reason"),
            field_path=spec.get("fieldPath"),
            transition=bool(_OLD_SELF_RE.search(rule)),
            optional_old_self=spec.get("optionalOldSelf") is True,
        )

    def check(self, cel_self: Any, path: str) -> str | None:
        """Evaluate on create; return an error message or None."""
        if self.transition and not self.optional_old_self:
            return None  # transition rule: only evaluated on update
        compiled = _compile_cel(self.rule)
        if compiled.program is None:
            if self.rule not in UNSUPPORTED_RULES:
                UNSUPPORTED_RULES[self.rule] = compiled.error or "unsupported"
                warnings.warn(
                    "kube_schema: skipping CEL rule cel-python cannot compile: "
                    f"{self.rule!r} "
                    f"({compiled.error})",
                    stacklevel=2,
                )
            return None
        activation: dict[str, Any] = {"self": cel_self}
        if self.transition:
            activation["oldSelf"] = _OPTIONAL_NONE
        result = _run(compiled.program, activation)
        where = path
        if self.field_path:  # relative JSONPath such as ".name" or "['key']"
            where = (
                self.field_path.lstrip(".")
                if path == "<root>"
                else path + self.field_path
            )
        reason = f" [{self.reason}]" if self.reason else ""
        if isinstance(result, celtypes.BoolType):
            if result:
                return None
            return (
                f"{where}: {self._message(activation)}{reason} "
                f"(x-kubernetes-validations rule: {self.rule})"
            )
        return (
            f"{where}: rule evaluation error: {_describe(result)}{reason} "
            f"(x-kubernetes-validations rule: {self.rule})"
        )

    def _message(self, activation: dict[str, Any]) -> str:
        if self.message_expression:
            compiled = _compile_cel(self.message_expression)
            if compiled.program is not None:
                value = _run(compiled.program, activation)
                if isinstance(value, str) and value.strip():
                    return str(value)
        if self.message:
            return self.message
        return f"failed rule: {self.rule}"


def _run(program: Any, activation: dict[str, Any]) -> Any:
    try:
        return program.evaluate(activation)
    except celpy.CELEvalError as exc:
        return exc
    except Exception as exc:  # a runtime error in a rule is a failure
        return exc


def _describe(result: Any) -> str:
    if isinstance(result, BaseException):
        args = result.args[0] if result.args else ""
        return f"{type(result).__name__}: {args}"
    return f"rule returned {type(result).__name__} {result!r}, not a bool"


# Python types of a JSON value per openAPI type.
_PY_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}


def _type_matches(value: Any, schema_type: str | None) -> bool:
    expected = _PY_TYPES.get(schema_type or "")
    if expected is None:
        return True
    if isinstance(value, bool):  # bool is an int subclass
        return schema_type == "boolean"
    return isinstance(value, expected)


@dataclass(eq=False)
class _Node:
    """A compiled structural-schema node: what CEL evaluation and defaulting need."""

    type: str | None = None
    format: str | None = None
    nullable: bool = False
    int_or_string: bool = False
    props: dict[str, _Node] = field(default_factory=dict)
    cel_names: dict[str, str] = field(default_factory=dict)
    additional: _Node | None = None
    items: _Node | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    rules: tuple[_Rule, ...] = ()
    has_rules: bool = False  # rules here or below
    has_defaults: bool = False  # defaults below

    def child(self, key: str) -> _Node | None:
        return self.props.get(key) or self.additional


def _build_node(schema: Mapping[str, Any]) -> _Node:
    node = _Node(
        type=schema.get("type"),
        format=schema.get("format"),
        nullable=schema.get("nullable") is True,
        int_or_string=schema.get("x-kubernetes-int-or-string") is True,
        rules=tuple(
            _Rule.from_spec(r) for r in schema.get("x-kubernetes-validations") or ()
        ),
    )
    for name, sub in (schema.get("properties") or {}).items():
        child = _build_node(sub)
        node.props[name] = child
        escaped = cel_escape(name)
        if escaped != name:
            node.cel_names[name] = escaped
        if "default" in sub:
            node.defaults[name] = sub["default"]
    if isinstance(schema.get("additionalProperties"), Mapping):
        node.additional = _build_node(schema["additionalProperties"])
    if isinstance(schema.get("items"), Mapping):
        node.items = _build_node(schema["items"])
    children = [*node.props.values(), node.additional, node.items]
    node.has_rules = bool(node.rules) or any(c.has_rules for c in children if c)
    node.has_defaults = bool(node.defaults) or any(
        c.has_defaults for c in children if c
    )
    return node


def _defaulted(value: Any, node: _Node | None) -> Any:
    """Copy ``value``, dropping null fields (unless nullable) and applying defaults."""
    if isinstance(value, dict):
        out = {}
        for key, sub in value.items():
            child = node.child(key) if node else None
            if sub is None and not (child and child.nullable):
                continue
            out[key] = _defaulted(sub, child)
        if node is not None and node.type in (None, "object"):
            for key, default in node.defaults.items():
                if key not in out:
                    out[key] = _defaulted(default, node.props[key])
        return out
    if isinstance(value, list):
        return [_defaulted(x, node.items if node else None) for x in value]
    return value


def _to_cel(value: Any, node: _Node | None) -> Any:  # noqa: PLR0911
    """Convert a JSON value to CEL, typed and property-escaped per the schema."""
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        if node is not None and node.type == "number":
            return celtypes.DoubleType(value)
        return celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return _string_to_cel(value, node)
    if isinstance(value, dict):
        if node is None:
            return celtypes.MapType(
                {celtypes.StringType(k): _to_cel(v, None) for k, v in value.items()}
            )
        return celtypes.MapType(
            {
                celtypes.StringType(node.cel_names.get(k, k)): _to_cel(v, node.child(k))
                for k, v in value.items()
            }
        )
    if isinstance(value, list):
        item = node.items if node else None
        return celtypes.ListType([_to_cel(v, item) for v in value])
    return value  # None (null)


def _string_to_cel(value: str, node: _Node | None) -> Any:
    """Type strings by format, like Kubernetes: date-time, byte, duration."""
    fmt = node.format if node is not None else None
    try:
        if fmt in ("date-time", "date"):
            return celtypes.TimestampType(value)
        if fmt == "byte":
            return celtypes.BytesType(base64.b64decode(value))
        if fmt == "duration":
            return celtypes.DurationType(value)
    except (ValueError, TypeError, binascii.Error):
        pass
    return celtypes.StringType(value)


def _cel_errors(
    value: Any, node: _Node, path: list[str | int], errors: list[str]
) -> None:
    if node.rules and _type_matches(
        value, node.type if not node.int_or_string else None
    ):
        cel_self = _to_cel(value, node)
        where = _format_path(path)
        for rule in node.rules:
            message = rule.check(cel_self, where)
            if message:
                errors.append(message)
    if isinstance(value, dict):
        for key, sub in value.items():
            child = node.child(key)
            if child is not None and child.has_rules:
                _cel_errors(sub, child, [*path, key], errors)
    elif isinstance(value, list) and node.items is not None and node.items.has_rules:
        for index, sub in enumerate(value):
            _cel_errors(sub, node.items, [*path, index], errors)


# ------------------------------------------------------------------------------------
# compiled schemas and the CRD registry
# ------------------------------------------------------------------------------------


class CompiledSchema:
    """An openAPIV3Schema compiled once: JSON Schema validator + CEL/defaulting tree."""

    def __init__(self, openapi_v3_schema: Mapping[str, Any]) -> None:
        self.openapi_v3_schema = openapi_v3_schema
        self.json_schema = _root_jsonschema(openapi_v3_schema)
        self.validator = _K8sValidator(self.json_schema, format_checker=_FORMAT_CHECKER)
        self.root = _build_node(openapi_v3_schema)

    def errors(self, obj: Any) -> list[str]:
        """Return schema, metadata and CEL errors for ``obj`` (empty when valid)."""
        if not isinstance(obj, dict):
            return [f"<root>: expected an object, got {type(obj).__name__}"]
        errors = _schema_error_messages(self.validator, obj)
        errors.extend(_metadata_errors(obj.get("metadata")))
        if self.root.has_rules:
            cel: list[str] = []
            _cel_errors(_defaulted(obj, self.root), self.root, [], cel)
            errors.extend(cel)
        return errors


@dataclass(frozen=True)
class CRDVersion:
    """One version of a CRD, as found in the vendored fixtures."""

    group: str
    version: str
    kind: str
    plural: str
    scope: str
    served: bool
    storage: bool
    deprecated: bool
    openapi_v3_schema: Mapping[str, Any] = field(repr=False, hash=False, compare=False)
    source: Path

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` objects of this version carry."""
        return f"{self.group}/{self.version}"

    @property
    def namespaced(self) -> bool:
        """Whether the kind is namespace-scoped."""
        return self.scope == "Namespaced"


class CRDRegistry:
    """All CRDs under a directory, loaded lazily on first use and cached."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._versions: dict[tuple[str, str, str], CRDVersion] | None = None
        self._compiled: dict[tuple[str, str], CompiledSchema] = {}

    def _load(self) -> dict[tuple[str, str, str], CRDVersion]:
        if self._versions is not None:
            return self._versions
        with self._lock:
            if self._versions is None:
                versions: dict[tuple[str, str, str], CRDVersion] = {}
                for path in sorted(self.root.glob("*/*.yaml")):
                    with path.open("rb") as fh:
                        for doc in yaml.load_all(fh, Loader=_YAML_LOADER):
                            if (
                                isinstance(doc, dict)
                                and doc.get("kind") == "CustomResourceDefinition"
                            ):
                                versions.update(_crd_versions(doc, path))
                if not versions:
                    msg = f"no CRDs found under {self.root}"
                    raise FileNotFoundError(msg)
                self._versions = versions
        return self._versions

    def load(self) -> CRDRegistry:
        """Load the CRDs now (idempotent); return self."""
        self._load()
        return self

    def __len__(self) -> int:
        return len(self._load())

    def __iter__(self) -> Iterator[CRDVersion]:
        return iter(self._load().values())

    def kinds(self) -> list[tuple[str, str]]:
        """Return every (apiVersion, kind) known, served or not."""
        return sorted((v.api_version, v.kind) for v in self)

    def has(self, api_version: str, kind: str) -> bool:
        """Return whether a served CRD version exists for ``apiVersion``/``kind``."""
        group, _, version = api_version.rpartition("/")
        found = self._load().get((group, version, kind))
        return found is not None and found.served

    def lookup(self, api_version: str, kind: str) -> CRDVersion:
        """Return the served CRD version for ``apiVersion``/``kind``.

        Raises:
            LookupError: With a readable explanation when unknown or not served.
        """
        versions = self._load()
        group, _, version = api_version.rpartition("/")
        found = versions.get((group, version, kind))
        if found is None:
            same_kind = sorted(
                v.api_version
                for v in versions.values()
                if v.kind == kind and v.group == group
            )
            if same_kind:
                msg = (
                    f"{kind} has no version {version!r} in group {group!r} "
                    f"(known: {', '.join(same_kind)})"
                )
            else:
                in_group = sorted(
                    {v.kind for v in versions.values() if v.group == group}
                )
                hint = f"; kinds in {group}: {', '.join(in_group)}" if in_group else ""
                msg = f"no CRD for apiVersion {api_version!r} kind {kind!r}{hint}"
            raise LookupError(msg)
        if not found.served:
            msg = f"{kind} version {api_version!r} is not served by its CRD"
            raise LookupError(msg)
        return found

    def compiled(self, api_version: str, kind: str) -> CompiledSchema:
        """Return the (cached) compiled schema of a served ``apiVersion``/``kind``."""
        key = (api_version, kind)
        schema = self._compiled.get(key)
        if schema is None:
            schema = CompiledSchema(self.lookup(api_version, kind).openapi_v3_schema)
            self._compiled[key] = schema
        return schema


def _crd_versions(
    doc: Mapping[str, Any], path: Path
) -> Iterator[tuple[tuple[str, str, str], CRDVersion]]:
    spec = doc["spec"]
    group, kind = spec["group"], spec["names"]["kind"]
    for v in spec.get("versions") or ():
        schema = (
            (v.get("schema") or {}).get("openAPIV3Schema")
            or (spec.get("validation") or {}).get("openAPIV3Schema")
            or {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        )
        yield (
            (group, v["name"], kind),
            CRDVersion(
                group=group,
                version=v["name"],
                kind=kind,
                plural=spec["names"]["plural"],
                scope=spec["scope"],
                served=bool(v.get("served")),
                storage=bool(v.get("storage")),
                deprecated=bool(v.get("deprecated")),
                openapi_v3_schema=schema,
                source=path,
            ),
        )


REGISTRY = CRDRegistry(CRD_DIR)
"""The vendored CRDs (tests/fixtures/crds); loaded on first use."""


def get_registry() -> CRDRegistry:
    """Return :data:`REGISTRY`, loading the CRDs on first call."""
    return REGISTRY.load()


# ------------------------------------------------------------------------------------
# public API
# ------------------------------------------------------------------------------------


def validate(obj: dict) -> list[str]:
    """Validate a Kubernetes object against the CRD of its apiVersion/kind.

    Returns:
        Human-readable errors; an empty list means the API server would accept the
        create.
    """
    if not isinstance(obj, dict):
        return [f"<root>: expected an object, got {type(obj).__name__}"]
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not api_version:
        return ["apiVersion: required string"]
    if not isinstance(kind, str) or not kind:
        return ["kind: required string"]
    try:
        crd = get_registry().lookup(api_version, kind)
    except LookupError as exc:
        return [f"{api_version}/{kind}: {exc}"]
    errors = []
    meta = obj.get("metadata")
    if not crd.namespaced and isinstance(meta, dict) and "namespace" in meta:
        errors.append(
            f"metadata.namespace: {kind} ({api_version}) is cluster-scoped and must "
            f"not set a namespace (got {meta['namespace']!r})"
        )
    errors.extend(get_registry().compiled(api_version, kind).errors(obj))
    return errors


_SCHEMA_CACHE: dict[str, CompiledSchema] = {}


def validate_with_schema(obj: dict, openapi_v3_schema: dict) -> list[str]:
    """Validate ``obj`` against an openAPIV3Schema given directly (e.g. our own XRD).

    Same engine as :func:`validate` (schema conversion, metadata checks, defaults,
    CEL), without the CRD lookup and scope check.
    """
    key = hashlib.sha256(
        json.dumps(openapi_v3_schema, sort_keys=True, default=str).encode()
    ).hexdigest()
    compiled = _SCHEMA_CACHE.get(key)
    if compiled is None:
        compiled = CompiledSchema(
            json.loads(json.dumps(openapi_v3_schema, default=str))
        )
        _SCHEMA_CACHE[key] = compiled
    return compiled.errors(obj)


@cache
def vendored_charts() -> dict[tuple[str, str], Path]:
    """The packaged charts in ``CHART_DIRS``, by (name, version) from their Chart.yaml."""
    charts: dict[tuple[str, str], Path] = {}
    for archive in sorted(a for d in CHART_DIRS for a in d.glob("*.tgz")):
        with tarfile.open(archive, mode="r:gz") as tar:
            # helm package puts every file under one folder named after the chart.
            member = next(m for m in tar if m.name.count("/") == 1 and m.name.endswith("/Chart.yaml"))
            handle = tar.extractfile(member)
            assert handle is not None, f"{archive}: {member.name} is not a file"
            meta = yaml.load(handle.read(), Loader=_YAML_LOADER)  # noqa: S506 - safe loader
        key = (str(meta["name"]), str(meta["version"]))
        assert key not in charts, f"{archive} and {charts.get(key)} both hold {key}"
        charts[key] = archive
    return charts


def chart_archive(chart: str, version: str | None = None) -> Path:
    """The vendored package of ``chart`` at ``version``.

    When ``version`` is None: the one in ``CHART_DIR``, the Composition's default (older
    versions must be named).

    Raises:
        KeyError: If no such chart is vendored (or several versions are and none was named).
    """
    charts = vendored_charts()
    if version is None:
        versions = sorted(v for (name, v), a in charts.items() if name == chart and a.parent == CHART_DIR)
        if len(versions) != 1:
            msg = f"chart {chart!r}: vendored versions {versions}, name one"
            raise KeyError(msg)
        version = versions[0]
    archive = charts.get((chart, version))
    if archive is None:
        msg = f"chart {chart!r} version {version!r} is not vendored in {CHART_DIR}"
        raise KeyError(msg)
    return archive


def chart_file(archive: Path, name: str) -> bytes | None:
    """The bytes of ``name`` (relative to the chart folder) in a packaged chart, if present."""
    with tarfile.open(archive, mode="r:gz") as tar:
        for member in tar:
            if member.isfile() and member.name.partition("/")[2] == name:
                handle = tar.extractfile(member)
                return handle.read() if handle is not None else None
    return None


@cache
def _values_validator(chart: str, version: str | None = None) -> Any:
    archive = chart_archive(chart, version)
    raw = chart_file(archive, "values.schema.json")
    if raw is None:
        msg = f"chart {chart!r} ({archive.name}) has no values.schema.json"
        raise KeyError(msg)
    schema = json.loads(raw)
    cls = jsonschema.validators.validator_for(
        schema, default=jsonschema.Draft7Validator
    )
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@cache
def has_values_schema(chart: str, version: str) -> bool:
    """Whether the vendored ``chart`` at ``version`` ships a values.schema.json."""
    return chart_file(chart_archive(chart, version), "values.schema.json") is not None


def validate_values(chart: str, values: dict, version: str | None = None) -> list[str]:
    """Validate Helm values against the values.schema.json inside the vendored chart package.

    The draft is the one the schema declares in ``$schema``. ``version`` picks the
    package; None means the only vendored version of ``chart``.

    Raises:
        KeyError: If the chart (version) is not vendored or its package has no
            values.schema.json.
    """
    validator = _values_validator(chart, version)
    return _schema_error_messages(validator, values)


def assert_valid(obj: dict) -> None:
    """Raise AssertionError listing every problem when ``obj`` would be rejected."""
    errors = validate(obj)
    if errors:
        name = (
            (obj.get("metadata") or {}).get("name", "<unnamed>")
            if isinstance(obj, dict)
            else "?"
        )
        kind = obj.get("kind") if isinstance(obj, dict) else "?"
        raise AssertionError(f"{kind} {name} is invalid:\n  " + "\n  ".join(errors))


APIS = Path(__file__).resolve().parent.parent / "apis"


@cache
def _xrd_schemas() -> dict[str, dict]:
    """Our XRDs' openAPIV3Schema (apis/*/definition.yaml), by XR and claim kind."""
    schemas: dict[str, dict] = {}
    for path in sorted(APIS.glob("*/*definition.yaml")):
        xrd = yaml.safe_load(path.read_text(encoding="utf-8"))
        (version,) = xrd["spec"]["versions"]
        for names in (xrd["spec"]["names"], xrd["spec"].get("claimNames")):
            if names:
                schemas[names["kind"]] = version["schema"]["openAPIV3Schema"]
    return schemas


def xr_status_errors(kind: str, status: dict) -> list[str]:
    """Problems of an XR's ``status`` against our XRD of ``kind``.

    Crossplane's own ``conditions`` are left out: its XRD machinery adds them to the CRD.
    A key the XRD does not name is an error here (the API server would prune it).
    """
    ours = {k: v for k, v in status.items() if k != "conditions"}
    return validate_with_schema({"status": ours}, _xrd_schemas()[kind])
