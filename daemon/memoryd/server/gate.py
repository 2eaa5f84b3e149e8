"""Connections refused, never an abort, when file descriptors run out (issue 10, problem 3).

libzmq's ipc listener asserts (SIGABRT) when ``accept`` fails with EMFILE, and nothing in
libzmq bounds how many connections a socket accepts. So the daemon bounds them itself: the owner
thread reads the ROUTER's monitor (each connection accepted and each one gone) between messages
and, when the descriptors in use come within ``reserve`` of the soft limit, moves the socket
file aside; new clients are refused there (the socket is not found: memctl says the daemon is
not running and the hook answers nothing), connections already made keep being served. The file
goes back once enough of them have closed. The reserve covers what is already past ``connect``
when the file moves (the listen backlog, ~100), the connections accepted while the owner thread
was busy with one piece of work (≤ ~50 ms), and the daemon's own files (databases, index,
transcripts).

The monitor was read by a thread of its own: waking it twice a connection and handing it the
GIL cost each request ~0.3-0.5 ms of its server time (issue 12); read here, an event costs a few
µs and no thread switch."""

from __future__ import annotations

import contextlib
import os
import resource
import threading
import time
from pathlib import Path
from typing import Any

import structlog
import zmq
from zmq.utils.monitor import parse_monitor_message

log = structlog.get_logger()

RESERVE_MAX = 1024
# Below this soft limit the reserve is too small to hold the listen backlog: refusing is no
# longer sure to come before libzmq's abort (the start-up log says so).
LIMIT_LOW = 512
_FD_DIRS = ("/proc/self/fd", "/dev/fd")


def raise_fd_limit() -> tuple[int, int]:
    """The soft RLIMIT_NOFILE raised to the hard limit (one descriptor per client connection);
    returns (before, after). Where the hard limit is unlimited (macOS) or the kernel refuses,
    the soft limit stays."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == hard:
        return soft, soft
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return soft, hard
    return soft, soft


def reserve_for(limit: int) -> int:
    """Half the limit, up to RESERVE_MAX. The gate thread learns of each connection after libzmq
    accepted it: on busy cores it was measured 60-160 connections behind (a quarter of 1,024 as
    the reserve let libzmq reach the limit and abort about once in six runs under load), and the
    listen backlog (~100) is accepted after the file moved."""
    return min(limit // 2, RESERVE_MAX)


def open_fds() -> int | None:
    """Descriptors open in this process now, where the system can list them."""
    for folder in _FD_DIRS:
        with contextlib.suppress(OSError):
            return len(os.listdir(folder)) - 1  # the listing's own descriptor
    return None


# A drain that met this many events had a backlog: the monitor drops events past its queue's
# high-water mark (1,000), so the count is taken from the system again.
RESYNC_AFTER = 256


class ConnectionGate:
    """Counts the ROUTER's connections and keeps its socket file reachable only while there are
    descriptors to spare; also counts clients gone (``Server.close`` waits on them). Owner
    thread only: the loop polls ``monitor`` and calls ``drain``."""

    def __init__(self, router: zmq.Socket[Any]) -> None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.limit = soft if soft != resource.RLIM_INFINITY else 0  # 0: no limit to guard
        self.reserve = reserve_for(self.limit)
        # Held while the file is moved or put back, and by ``Server.keep_socket`` while it
        # checks the file: a file moved aside here is not lost.
        self.lock = threading.Lock()
        self.path: Path | None = None
        self.hidden = False
        self.refusals = 0  # times the file was moved aside
        self.disconnects = 0
        self._in_use = open_fds() or 0
        # MONITOR_STOPPED is sent only when asked for: it says the monitor is off.
        self.monitor = router.get_monitor_socket(
            zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_MONITOR_STOPPED
        )
        self._router = router
        self._stopped = False

    @property
    def _full_at(self) -> int:
        return self.limit - self.reserve

    @property
    def _open_at(self) -> int:
        return self.limit - self.reserve - self.reserve // 4

    def _aside(self) -> Path:
        assert self.path is not None
        return self.path.with_name(self.path.name + ".full")

    def drain(self) -> None:
        """Every event the monitor holds, handled."""
        handled = 0
        while not self._stopped:
            try:
                frames = self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            except zmq.ZMQError:
                return
            self._handle(parse_monitor_message(frames)["event"])
            handled += 1
        if handled >= RESYNC_AFTER:
            self._in_use = open_fds() or self._in_use
            self._check()

    def _handle(self, kind: int) -> None:
        if kind == zmq.EVENT_MONITOR_STOPPED:
            self._stopped = True
        elif kind == zmq.EVENT_ACCEPTED:
            self._in_use += 1
            if self.limit and self._in_use >= self._full_at and not self.hidden:
                self._in_use = open_fds() or self._in_use
                self._check()
        elif kind == zmq.EVENT_DISCONNECTED:
            self._in_use -= 1
            self.disconnects += 1
            if self.hidden and self._in_use < self._open_at:
                self._in_use = open_fds() or self._in_use
                self._check()

    def _check(self) -> None:
        if not self.limit:
            return
        if self._in_use >= self._full_at:
            self._refuse()
        elif self.hidden and self._in_use < self._open_at:
            self._accept_again()

    def _refuse(self) -> None:
        with self.lock:
            if self.hidden or self.path is None:
                return
            try:
                os.rename(self.path, self._aside())
            except OSError as exc:
                log.error("connections_unguarded", socket=str(self.path), error=str(exc))
                return
            self.hidden = True
            self.refusals += 1
        log.warning("connections_refused", open_fds=self._in_use, limit=self.limit)

    def _accept_again(self) -> None:
        with self.lock:
            if not self.hidden or self.path is None:
                return
            with contextlib.suppress(OSError):
                os.rename(self._aside(), self.path)
            self.hidden = False
        log.warning("connections_accepted_again", open_fds=self._in_use, limit=self.limit)

    def wait_disconnects(self, since: int, count: int, deadline: float) -> None:
        """Until ``count`` clients have gone since the ``disconnects`` count was ``since``, or
        the monotonic ``deadline``: the monitor read meanwhile."""
        poller = zmq.Poller()
        poller.register(self.monitor, zmq.POLLIN)
        while True:
            self.drain()
            left = deadline - time.monotonic()
            if self.disconnects >= since + count or left <= 0 or self._stopped:
                return
            poller.poll(max(1, int(left * 1000)))

    def stop(self) -> None:
        """The monitor off and the file back where clients (and the shutdown's unlink) find
        it."""
        with contextlib.suppress(zmq.ZMQError):
            self._router.disable_monitor()
        self.drain()
        self.monitor.close(linger=0)
        self._stopped = True
        self._accept_again()
