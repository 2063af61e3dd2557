"""Reading the protobuf bodies kubectl sends for built-in kinds (``kubectl create namespace``).

kubectl's typed clients write built-in objects as ``application/vnd.kubernetes.protobuf``
(and do not fall back to JSON on 415). The encoding (apimachinery ``runtime/serializer/
protobuf``): the magic bytes ``k8s\\0``, then a ``runtime.Unknown`` message (1: typeMeta
{1: apiVersion, 2: kind}, 2: raw, 3: contentEncoding, 4: contentType) whose ``raw`` is the
object's own message, where field 1 is always ``ObjectMeta`` (1: name, 2: generateName,
3: namespace, 11: labels, 12: annotations; maps are repeated {1: key, 2: value} entries, as
in ``k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto``).

Only what the loopback server stores for such objects is decoded: apiVersion, kind and those
metadata fields; the rest of the object (a Namespace's spec and status) is dropped, which is
what the emulator needs (it sets a Namespace's status itself). Pure functions.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["MAGIC", "InvalidProtobuf", "decode_object"]

MAGIC = b"k8s\x00"


class InvalidProtobuf(ValueError):
    """The body is not a Kubernetes protobuf envelope this decoder understands."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise InvalidProtobuf("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise InvalidProtobuf("varint too long")


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) pairs: varints as int, length-delimited as bytes; fixed-width
    fields are skipped."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise InvalidProtobuf("truncated field")
            yield number, data[pos : pos + length]
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise InvalidProtobuf(f"unsupported wire type {wire}")


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise InvalidProtobuf("expected a string field")
    return value.decode("utf-8")


def _entry(value: int | bytes) -> tuple[str, str]:
    if not isinstance(value, bytes):
        raise InvalidProtobuf("expected a map entry")
    parts = {n: _text(v) for n, v in _fields(value)}
    return parts.get(1, ""), parts.get(2, "")


def _metadata(data: bytes) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    names = {1: "name", 2: "generateName", 3: "namespace"}
    for number, value in _fields(data):
        if number in names and _text(value):
            meta[names[number]] = _text(value)
        elif number in (11, 12):
            key, val = _entry(value)
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = val
    return meta


def decode_object(body: bytes) -> dict[str, Any]:
    """``{"apiVersion", "kind", "metadata": {name, generateName, namespace, labels,
    annotations}}`` of a protobuf-encoded Kubernetes object.

    :raises InvalidProtobuf: no ``k8s\\0`` envelope, or malformed fields.
    """
    if not body.startswith(MAGIC):
        raise InvalidProtobuf("missing the k8s\\0 magic prefix")
    doc: dict[str, Any] = {}
    raw = b""
    for number, value in _fields(body[len(MAGIC) :]):
        if number == 1 and isinstance(value, bytes):
            for n, v in _fields(value):
                doc["apiVersion" if n == 1 else "kind"] = _text(v)
        elif number == 2 and isinstance(value, bytes):
            raw = value
    for number, value in _fields(raw):
        if number == 1 and isinstance(value, bytes):
            doc["metadata"] = _metadata(value)
    doc.setdefault("metadata", {})
    return doc
