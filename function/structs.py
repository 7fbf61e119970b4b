"""Read fields straight out of protobuf Structs.

Observed resources arrive as ``google.protobuf.Struct``. Converting each one
to a dict costs far more than reading the handful of fields the planner needs
(see issue 5), so these helpers walk the Struct in place. Map access on a
protobuf map auto-creates missing keys, hence the ``in`` checks before every
lookup.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.protobuf import struct_pb2


def value_at(s: struct_pb2.Struct, *path: str) -> struct_pb2.Value | None:
    """Return the Value at ``path`` in ``s``, or None if any step is missing."""
    cur = s
    last = len(path) - 1
    for i, key in enumerate(path):
        fields = cur.fields
        if key not in fields:
            return None
        v = fields[key]
        if i == last:
            return v
        if v.WhichOneof("kind") != "struct_value":
            return None
        cur = v.struct_value
    return None


def struct_at(s: struct_pb2.Struct, *path: str) -> struct_pb2.Struct | None:
    """Return the Struct at ``path``, or None."""
    v = value_at(s, *path) if path else None
    if not path:
        return s
    if v is None or v.WhichOneof("kind") != "struct_value":
        return None
    return v.struct_value


def str_at(s: struct_pb2.Struct, *path: str) -> str | None:
    """Return the non-empty string at ``path``, or None."""
    v = value_at(s, *path)
    if v is None or v.WhichOneof("kind") != "string_value" or not v.string_value:
        return None
    return v.string_value


def bool_at(s: struct_pb2.Struct, *path: str) -> bool | None:
    """Return the bool at ``path``, or None when absent or not a bool."""
    v = value_at(s, *path)
    if v is None or v.WhichOneof("kind") != "bool_value":
        return None
    return v.bool_value


def list_at(s: struct_pb2.Struct, *path: str) -> list[struct_pb2.Value]:
    """Return the list at ``path`` (empty if absent)."""
    v = value_at(s, *path)
    if v is None or v.WhichOneof("kind") != "list_value":
        return []
    return list(v.list_value.values)


def structs_at(s: struct_pb2.Struct, *path: str) -> Iterator[struct_pb2.Struct]:
    """Yield the Struct items of the list at ``path``."""
    for item in list_at(s, *path):
        if item.WhichOneof("kind") == "struct_value":
            yield item.struct_value


def strings_at(s: struct_pb2.Struct, *path: str) -> list[str]:
    """Return the string items of the list at ``path``."""
    return [i.string_value for i in list_at(s, *path) if i.WhichOneof("kind") == "string_value"]


def condition_status(s: struct_pb2.Struct, typ: str, *path: str) -> str | None:
    """Return the status ("True"/"False"/"Unknown") of condition ``typ``.

    ``path`` is where the condition list lives (default ``status.conditions``).
    """
    for c in structs_at(s, *(path or ("status", "conditions"))):
        if str_at(c, "type") == typ:
            return str_at(c, "status")
    return None


def to_python(v: struct_pb2.Value) -> Any:
    """Convert one Value (and below) to plain Python; for small subtrees only."""
    kind = v.WhichOneof("kind")
    if kind == "struct_value":
        return {k: to_python(x) for k, x in v.struct_value.fields.items()}
    if kind == "list_value":
        return [to_python(x) for x in v.list_value.values]
    if kind == "number_value":
        n = v.number_value
        return int(n) if n.is_integer() else n
    if kind == "string_value":
        return v.string_value
    if kind == "bool_value":
        return v.bool_value
    return None
