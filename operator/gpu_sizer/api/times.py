"""Timestamps on the wire: RFC 3339 in UTC, second precision, ``Z`` suffix.

This is the form of Kubernetes' ``metav1.Time`` (``2026-01-02T03:04:05Z``): what the API server
writes in ``creationTimestamp`` and ``lastTransitionTime``, and what the operator writes in
statuses, records and Events, so that one string comparison or one parser serves both.
"""

from __future__ import annotations

import datetime

__all__ = ["RFC3339", "now_rfc3339", "parse_time", "rfc3339"]

#: ``strftime`` format of :func:`rfc3339` (``metav1.Time``'s ``RFC3339`` layout, always UTC).
RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


def rfc3339(t: datetime.datetime) -> str:
    """``t`` as ``2026-01-02T03:04:05Z``: converted to UTC, fractions of a second dropped.

    A naive ``t`` is taken as UTC already (as :func:`parse_time` reads one), never as the
    machine's local time, so the text does not depend on the host's time zone.
    """
    if t.tzinfo is not None:
        t = t.astimezone(datetime.UTC)
    return t.strftime(RFC3339)


def now_rfc3339() -> str:
    """The current time as :func:`rfc3339` writes it (what ``metav1.Time`` fields hold)."""
    return rfc3339(datetime.datetime.now(datetime.UTC))


def parse_time(text: str | None) -> datetime.datetime | None:
    """RFC 3339 (``2026-01-02T03:04:05Z``) to an aware datetime; a timestamp without an offset
    (someone's ``kubectl edit``) is read as UTC, so comparing it with ``now`` cannot raise;
    ``None`` when empty or unreadable."""
    if not text:
        return None
    try:
        t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=datetime.UTC)
