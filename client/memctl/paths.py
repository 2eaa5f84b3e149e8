"""Where the daemon's socket lives. Shared by client and daemon so both derive the same path.

``MEMORYD_SOCKET`` (a path or a full ``ipc://``/``tcp://`` endpoint) overrides everything;
otherwise ``$XDG_RUNTIME_DIR/memoryd/memoryd.sock``, and without XDG_RUNTIME_DIR (macOS, some
containers) a private directory under the user's state directory (SPEC §4).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SOCKET_NAME = "memoryd.sock"


def runtime_dir() -> Path:
    """The directory that holds the socket and the lock file."""
    override = os.environ.get("MEMORYD_SOCKET")
    if override:
        path = override.removeprefix("ipc://")
        if not override.startswith("tcp://"):
            return Path(path).parent
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "memoryd"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "memoryd" / "run"
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "memoryd" / "run"


def endpoint() -> str:
    """The ZeroMQ endpoint clients connect to and the daemon binds."""
    override = os.environ.get("MEMORYD_SOCKET")
    if override:
        if override.startswith(("ipc://", "tcp://")):
            return override
        return "ipc://" + override
    return "ipc://" + str(runtime_dir() / SOCKET_NAME)


def ipc_path(ep: str) -> Path | None:
    """The filesystem path of an ``ipc://`` endpoint, or None for other transports."""
    return Path(ep.removeprefix("ipc://")) if ep.startswith("ipc://") else None
