"""The daemon's footprint on the machine: the single-instance lock (in the data directory: it
guards the data, and a runtime directory can be removed under a running daemon, as logind does),
the private runtime directory and its socket file, and the systemd readiness notification
(design §4, §12)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path


class UnsafeRuntimeDir(PermissionError):
    """The runtime directory is a symlink, owned by someone else, or not private."""


class AlreadyRunning(RuntimeError):
    """Another daemon holds the lock."""


def prepare_private_dir(path: Path) -> None:
    """Create ``path`` 0700, or check an existing one: a real directory owned by us that no one
    else can enter."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UnsafeRuntimeDir(f"{path} is not a directory (a symlink?); refusing to use it")
    if info.st_uid != os.getuid():
        raise UnsafeRuntimeDir(
            f"{path} is owned by uid {info.st_uid}, not by you; refusing to use it"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        # Never chmod a directory that already exists: it may be one the user shares.
        raise UnsafeRuntimeDir(
            f"{path} is open to other users (mode {stat.S_IMODE(info.st_mode):o}); make it 0700 "
            "or point MEMORYD_SOCKET at a private directory"
        )


class InstanceLock:
    """An ``flock`` on a file in the data directory; released by the kernel if the daemon dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise AlreadyRunning(
                f"memoryd is already running (pid {owner}, lock {self.path}); "
                "stop it first or use `memctl status`"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def claim_socket(path: Path) -> None:
    """Make way for our socket at ``path``: a file left there by a dead daemon is removed; a
    socket someone still serves (a daemon on other data sharing this runtime directory) is
    not taken over."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISSOCK(info.st_mode) and _serving(path):
        raise AlreadyRunning(f"another memoryd serves {path}; stop it first")
    path.unlink(missing_ok=True)


def _serving(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """Files created inside (the ipc socket) get mode 0600: a socket is created 0777 & ~umask,
    so the umask also clears the owner's execute bit."""
    old = os.umask(0o177)
    try:
        yield
    finally:
        os.umask(old)


def notify_systemd(state: str = "READY=1") -> bool:
    """Tell systemd (Type=notify) about our state when ``NOTIFY_SOCKET`` is set."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    target = "\0" + address[1:] if address.startswith("@") else address
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(state.encode(), target)
    return True
