"""The protobuf body of ``kubectl create namespace``, decoded to what the emulator stores."""

from __future__ import annotations

import pytest
from gpu_sizer_testbed.protobuf import InvalidProtobuf, decode_object

# The request body kubectl v1.37.1 sent for `kubectl create namespace foo` (seen with -v=9).
KUBECTL_CREATE_NAMESPACE_FOO = bytes.fromhex(
    "6b387300 0a0f0a02 76311209 4e616d65 73706163 65121b0a 130a0366 6f6f1200"
    "1a002200 2a003200 38004200 12001a02 0a001a00 2200".replace(" ", "")
)


def _field(number: int, payload: bytes) -> bytes:
    return bytes([number << 3 | 2, len(payload)]) + payload


def test_kubectl_create_namespace_body() -> None:
    assert decode_object(KUBECTL_CREATE_NAMESPACE_FOO) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "foo"},
    }


def test_labels_and_annotations_are_maps() -> None:
    meta = (
        _field(1, b"team-a")
        + _field(11, _field(1, b"env") + _field(2, b"dev"))
        + _field(11, _field(1, b"team") + _field(2, b"a"))
        + _field(12, _field(1, b"note") + _field(2, b"hi"))
    )
    body = (
        b"k8s\x00"
        + _field(1, _field(1, b"v1") + _field(2, b"Namespace"))
        + _field(2, _field(1, meta))
    )
    assert decode_object(body)["metadata"] == {
        "name": "team-a",
        "labels": {"env": "dev", "team": "a"},
        "annotations": {"note": "hi"},
    }


@pytest.mark.parametrize("body", [b"", b"{}", b"k8s\x00\x0a\x05ab"])
def test_malformed_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(InvalidProtobuf):
        decode_object(body)
