"""Where the daemon's socket lives. Shared by client and daemon so both derive the same path.

``MEMORYD_SOCKET`` (a path or a full ``ipc://``/``tcp://`` endpoint) overrides everything;
otherwise ``$XDG_RUNTIME_DIR/memoryd/memoryd.sock``, and without XDG_RUNTIME_DIR (macOS, some
containers) a private directory under the user's state directory (design §4).

Plain ``os.path`` strings, not pathlib: this module is on every hook's start-up path.
"""

from __future__ import annotations

import os
import sys

SOCKET_NAME = "memoryd.sock"


def cwd() -> str:
    """The working directory; "/" (no project) when it was deleted under us: the hook then goes
    by the payload's cwd, a command says there is no project here."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        return "/"


def runtime_dir() -> str:
    """The directory that holds the socket and the lock file."""
    override = os.environ.get("MEMORYD_SOCKET")
    if override and not override.startswith("tcp://"):
        return os.path.dirname(override.removeprefix("ipc://"))
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return os.path.join(xdg, "memoryd")
    home = os.path.expanduser("~")
    if sys.platform == "darwin":
        return os.path.join(home, "Library", "Caches", "memoryd", "run")
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state")
    return os.path.join(state, "memoryd", "run")


def endpoint() -> str:
    """The ZeroMQ endpoint clients connect to and the daemon binds."""
    override = os.environ.get("MEMORYD_SOCKET")
    if override:
        if override.startswith(("ipc://", "tcp://")):
            return override
        return "ipc://" + override
    return "ipc://" + os.path.join(runtime_dir(), SOCKET_NAME)


def ipc_path(ep: str) -> str | None:
    """The filesystem path of an ``ipc://`` endpoint, or None for other transports."""
    return ep.removeprefix("ipc://") if ep.startswith("ipc://") else None


# "pyzmq" in either: every request through pyzmq, not the wire client (``memctl.zmtp``): the way
# out should it ever misbehave. The hook's variable came first; the other is every command's.
TRANSPORT_ENVS = ("MEMCTL_TRANSPORT", "MEMCTL_HOOK_TRANSPORT")


def pyzmq_only() -> bool:
    """Whether the environment asks for pyzmq alone (``TRANSPORT_ENVS``)."""
    return any(os.environ.get(name) == "pyzmq" for name in TRANSPORT_ENVS)
