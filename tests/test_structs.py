"""The fast Struct writers give exactly what protobuf's own ``Struct.update`` gives."""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from function import structs

_scalars = st.one_of(
    st.text(max_size=8),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False),
    st.none(),
)
_json: st.SearchStrategy[Any] = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=25,
)
_objects = st.dictionaries(st.text(max_size=6), _json, max_size=6)


def _reference(base: dict[str, Any], d: dict[str, Any]) -> bytes:
    s = struct_pb2.Struct()
    s.update(base)
    s.update(d)
    return s.SerializeToString(deterministic=True)


@settings(max_examples=300, deadline=None)
@given(_objects, _objects)
def test_update_is_struct_update(base: dict[str, Any], d: dict[str, Any]) -> None:
    s = struct_pb2.Struct()
    s.update(base)
    structs.update(s, d)
    assert s.SerializeToString(deterministic=True) == _reference(base, d)


@settings(max_examples=300, deadline=None)
@given(_objects)
def test_fill_into_an_empty_struct_is_struct_update(d: dict[str, Any]) -> None:
    s = struct_pb2.Struct()
    structs.fill(s, d)
    assert s.SerializeToString(deterministic=True) == _reference({}, d)
    assert s == struct_pb2.Struct(fields=_reference_struct(d).fields)


def _reference_struct(d: dict[str, Any]) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(d)
    return s


def test_values_protobuf_refuses_are_refused_the_same_way() -> None:
    for bad in ({"a": {1, 2}}, {"a": [object()]}, {"a": {"b": b"bytes"}}):
        errors = []
        for write in (structs.fill, struct_pb2.Struct.update):
            try:
                write(struct_pb2.Struct(), bad)
            except (ValueError, TypeError, AttributeError) as err:
                errors.append(type(err))
        assert len(errors) == 2
        assert errors[0] is errors[1]
