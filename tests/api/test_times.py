"""The one wire timestamp format (``metav1.Time``: RFC 3339, UTC, seconds, ``Z``) and its parser."""

from __future__ import annotations

import datetime

import pytest

from gpu_sizer.api.times import parse_time, rfc3339

UTC = datetime.UTC


def test_utc_time_is_written_to_the_second_with_z() -> None:
    t = datetime.datetime(2026, 1, 2, 3, 4, 5, 678_901, tzinfo=UTC)
    assert rfc3339(t) == "2026-01-02T03:04:05Z"


def test_an_offset_is_converted_to_utc_not_relabelled() -> None:
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    t = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=plus_two)
    assert rfc3339(t) == "2026-01-02T01:04:05Z"


def test_a_naive_time_is_read_as_utc() -> None:
    assert rfc3339(datetime.datetime(2026, 12, 31, 23, 59, 59)) == "2026-12-31T23:59:59Z"


@pytest.mark.parametrize(
    "t",
    [
        datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        datetime.datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC),
    ],
)
def test_written_times_read_back(t: datetime.datetime) -> None:
    assert parse_time(rfc3339(t)) == t


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, None),
        ("", None),
        ("yesterday", None),
        ("2026-01-02T03:04:05Z", datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        # someone's kubectl edit without an offset: UTC, so comparing with an aware now works
        ("2026-01-02T03:04:05", datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        (
            "2026-01-02T05:04:05+02:00",
            datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        ),
    ],
)
def test_parse_time(text: str | None, expected: datetime.datetime | None) -> None:
    assert parse_time(text) == expected
