"""Log levels that say what happened: a retried HTTP 429 is the API server's flow control.

kopf 1.45 logs every failed attempt of an API request at ERROR, including those it retries
(``kopf/_cogs/clients/api.py``, ``request``: ``logger.error(f"Request attempt {idx} failed; will
retry: {what} -> {e!r}")``). An HTTP 429 is the server asking to come back later, and kopf does:
on a real API server the first listing of a custom resource right after its CRD is established
answers ``429 storage is (re)initializing`` while the watch cache fills, so every fresh install
logged an ERROR at start-up for nothing. :class:`RetriedThrottling` logs those attempts at INFO;
the attempt kopf gives up on (``escalating``) and every other error keep their level.
"""

from __future__ import annotations

import logging

__all__ = ["RetriedThrottling", "install"]

#: What kopf's message holds for a throttled attempt it retries (``repr`` of the exception).
_RETRIED = "failed; will retry:"
_THROTTLED = "APITooManyRequestsError("


class RetriedThrottling(logging.Filter):
    """Lower kopf's ERROR for a retried HTTP 429 to INFO; pass every record on."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and record.name.startswith("kopf"):
            message = record.getMessage()
            if _RETRIED in message and _THROTTLED in message:
                record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def install(logger: logging.Logger | None = None) -> None:
    """Add :class:`RetriedThrottling` to every handler of ``logger`` (the root logger by
    default), where records of all of kopf's loggers arrive: kopf logs a request's attempts on
    whichever logger its caller passes (the watcher's, an object's), so a filter on one logger
    would miss the others. Idempotent."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, RetriedThrottling) for f in handler.filters):
            handler.addFilter(RetriedThrottling())
