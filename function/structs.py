"""Read fields straight out of protobuf Structs.

Observed resources arrive as ``google.protobuf.Struct``. Converting each one
to a dict costs far more than reading the handful of fields the planner needs,
so these helpers walk the Struct in place. Map access on a
protobuf map auto-creates missing keys, hence the ``in`` checks before every
lookup.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.protobuf import struct_pb2


def value_at(s: struct_pb2.Struct, *path: str) -> struct_pb2.Value | None:
    """Return the Value at ``path`` in ``s``, or None if any step is missing."""
    # One loop, no enumerate: these walks run thousands of times per call. A Value
    # of another kind reads as an empty Struct (reading never sets a field), so
    # the next step finds nothing, as it should.
    v = None
    for key in path:
        if v is not None:
            s = v.struct_value
        fields = s.fields
        if key not in fields:
            return None
        v = fields[key]
    return v


def struct_at(s: struct_pb2.Struct, *path: str) -> struct_pb2.Struct | None:
    """Return the Struct at ``path``, or None."""
    if not path:
        return s
    v = value_at(s, *path)
    if v is None or not v.HasField("struct_value"):
        return None
    return v.struct_value


def str_at(s: struct_pb2.Struct, *path: str) -> str | None:
    """Return the non-empty string at ``path``, or None."""
    v = value_at(s, *path)
    # string_value reads "" unless the Value holds a string.
    return None if v is None else (v.string_value or None)


def bool_at(s: struct_pb2.Struct, *path: str) -> bool | None:
    """Return the bool at ``path``, or None when absent or not a bool."""
    v = value_at(s, *path)
    if v is None or not v.HasField("bool_value"):
        return None
    return v.bool_value


def _values_at(s: struct_pb2.Struct, path: tuple[str, ...]) -> Any:
    """The live repeated Values of the list at ``path`` (empty tuple if absent)."""
    v = value_at(s, *path)
    if v is None or not v.HasField("list_value"):
        return ()
    return v.list_value.values


def structs_at(s: struct_pb2.Struct, *path: str) -> Iterator[struct_pb2.Struct]:
    """Yield the Struct items of the list at ``path``."""
    for item in _values_at(s, path):
        if item.HasField("struct_value"):
            yield item.struct_value


def strings_at(s: struct_pb2.Struct, *path: str) -> list[str]:
    """Return the string items of the list at ``path``."""
    return [i.string_value for i in _values_at(s, path) if i.HasField("string_value")]


def condition_status(s: struct_pb2.Struct, typ: str, *path: str) -> str | None:
    """Return the status ("True"/"False"/"Unknown") of condition ``typ``.

    ``path`` is where the condition list lives (default ``status.conditions``).
    """
    for item in _values_at(s, path or ("status", "conditions")):
        if not item.HasField("struct_value"):
            continue
        fields = item.struct_value.fields
        if "type" not in fields:
            continue
        t = fields["type"]
        if t.HasField("string_value") and t.string_value and t.string_value == typ:
            return str_at(item.struct_value, "status")
    return None


def failing_message(s: struct_pb2.Struct, typ: str = "Synced") -> str:
    """The message of condition ``typ`` (in status.conditions) when it is False, else ""."""
    for item in _values_at(s, ("status", "conditions")):
        cond = item.struct_value
        if str_at(cond, "type") == typ:
            return (str_at(cond, "message") or "") if str_at(cond, "status") == "False" else ""
    return ""


def kubectl_ref(s: struct_pb2.Struct, kind: str) -> str:
    """How kubectl names the object ``s`` of ``kind``: ``<plural>.<group>[ -n <ns>] <name>``.

    The plural is the kind's lower-case name plus "s" (true of the kinds it is used for).
    """
    group = (str_at(s, "apiVersion") or "").split("/", 1)[0]
    namespace = str_at(s, "metadata", "namespace")
    where = f" -n {namespace}" if namespace else ""
    return f"{kind.lower()}s.{group}{where} {str_at(s, 'metadata', 'name') or ''}"


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


# --- writing -------------------------------------------------------------------


def update(s: struct_pb2.Struct, d: dict[str, Any]) -> None:
    """``s.update(d)``: the same result and the same errors, ~1.7 times as fast.

    ``Struct.update`` is pure Python and checks every value against six types in
    turn (it was a third of each call). Keys already in ``s`` are replaced
    whole, as ``Struct.update`` replaces them; then ``fill`` writes ``d``.
    """
    fields = s.fields
    for key in d:
        if key in fields:
            del fields[key]
    fill(s, d)


def fill(s: struct_pb2.Struct, d: dict[str, Any]) -> None:
    """Write ``d`` into ``s``, which holds none of its keys; other types as ``Struct.update``.

    The exact built-in types of a JSON-like dict go first; anything else takes
    ``Struct.update``'s own path (and raises its errors).
    """
    fields = s.fields
    for key, value in d.items():
        t = type(value)
        if t is str:
            fields[key].string_value = value
        elif t is dict:
            if value:
                fill(fields[key].struct_value, value)
            else:
                fields[key].struct_value.Clear()  # marks the empty map as set
        elif t is list:
            lst = fields[key].list_value
            if value:
                _extend(lst, value)
            else:
                lst.Clear()
        elif t is bool:
            fields[key].bool_value = value
        elif t is int or t is float:
            fields[key].number_value = value
        else:
            s.update({key: value})


def _extend(lst: struct_pb2.ListValue, items: list[Any]) -> None:
    values = lst.values
    for value in items:
        t = type(value)
        if t is str:
            values.add().string_value = value
        elif t is dict:
            sub = values.add().struct_value
            if value:
                fill(sub, value)
            else:
                sub.Clear()  # marks the empty map as set
        else:
            lst.append(value)


def labels_of(obj: struct_pb2.Struct) -> dict[str, str]:
    """An object's metadata.labels as a dict."""
    found = struct_at(obj, "metadata", "labels")
    if found is None:
        return {}
    return {k: v.string_value for k, v in found.fields.items()}
