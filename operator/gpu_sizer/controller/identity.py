"""The operator's kopf identity: who this process is among peering replicas.

kopf 1.45 derives it in ``kopf._core.engines.peering.detect_own_id``: env ``POD_ID`` when set,
else ``getpass.getuser()@hostname/...``. ``getpass.getuser()`` reads ``LOGNAME``/``USER`` and
then the passwd database, and raises ``KeyError`` for a user id with no passwd entry, which is
what a pod runs as when its ``runAsUser`` is not in the image (OpenShift's arbitrary user ids,
or any ``securityContext`` override): kopf then dies at start-up before any handler runs. So the
operator always hands kopf an identity: ``POD_ID`` (kopf's own variable), else ``POD_NAME``
(the chart's Downward API variable, unique per replica), else kopf's format with the numeric
user id when the user has no name.
"""

from __future__ import annotations

import datetime
import getpass
import os
import secrets
import socket
from collections.abc import Mapping

__all__ = ["operator_identity"]


def operator_identity(env: Mapping[str, str] = os.environ) -> str:
    """This replica's kopf identity (a string; kopf's ``peering.Identity`` is a ``str``).

    :returns: ``POD_ID`` or ``POD_NAME`` when set, else ``user@host/YYYYmmddHHMMSS/xyz`` as kopf
        writes it, ``user`` being ``uid<N>`` when the passwd database has no entry for the uid.
    """
    for name in ("POD_ID", "POD_NAME"):
        value = env.get(name, "").strip()
        if value:
            return value
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER
        user = f"uid{os.getuid()}"
    now = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d%H%M%S")
    return f"{user}@{socket.gethostname()}/{now}/{secrets.token_hex(2)}"
