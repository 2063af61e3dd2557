"""A retried HTTP 429 is logged at INFO; kopf's other request errors keep their level."""

from __future__ import annotations

import io
import logging

from gpu_sizer.controller import log_levels

# kopf 1.45 kopf/_cogs/clients/api.py, request(): the lines it logs, as the operator printed
# them on a real API server right after the chart's CRDs were created.
RETRIED_429 = (
    "Request attempt #1/7 failed; will retry: GET https://127.0.0.1:6443/apis/gpusizer.dev/"
    "v1alpha1/gpumeasurements -> APITooManyRequestsError('storage is (re)initializing', "
    "{'kind': 'Status', 'apiVersion': 'v1', 'status': 'Failure', 'message': 'storage is "
    "(re)initializing', 'reason': 'TooManyRequests', 'details': {'retryAfterSeconds': 1}, "
    "'code': 429})"
)
ESCALATED_429 = RETRIED_429.replace("will retry", "escalating").replace("#1/7", "#7/7")
RETRIED_500 = RETRIED_429.replace("APITooManyRequestsError", "APIServerError")


def emitted(*records: tuple[str, str]) -> list[str]:
    stream = io.StringIO()
    logger = logging.getLogger("test-log-levels")
    logger.handlers = [logging.StreamHandler(stream)]
    logger.handlers[0].setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger.propagate = False
    log_levels.install(logger)
    log_levels.install(logger)  # idempotent: one filter per handler
    assert len(logger.handlers[0].filters) == 1
    for name, message in records:
        # Records of kopf's loggers arrive at the handler as they would through propagation.
        record = logging.getLogger(name).makeRecord(
            name, logging.ERROR, __file__, 1, message, None, None
        )
        logger.handle(record)
    return stream.getvalue().splitlines()


def test_retried_throttling_is_info_and_the_rest_stays_error() -> None:
    lines = emitted(
        ("kopf._cogs.clients.watching", RETRIED_429),
        ("kopf.objects", RETRIED_429),
        ("kopf._cogs.clients.watching", ESCALATED_429),
        ("kopf._cogs.clients.watching", RETRIED_500),
        ("gpu_sizer.controller", RETRIED_429),  # not kopf's: left alone
    )
    assert [line.split(" ", 2)[:2] for line in lines] == [
        ["INFO", "kopf._cogs.clients.watching:"],
        ["INFO", "kopf.objects:"],
        ["ERROR", "kopf._cogs.clients.watching:"],
        ["ERROR", "kopf._cogs.clients.watching:"],
        ["ERROR", "gpu_sizer.controller:"],
    ]
