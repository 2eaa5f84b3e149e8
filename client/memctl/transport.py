"""Request/reply over ZeroMQ with a hard time budget (design §4 client transport).

Each attempt is a DEALER connection of its own. Over the daemon's Unix socket it is spoken by
``memctl.zmtp`` (stdlib only: importing pyzmq cost a ``memctl`` command ~15 ms, a fifth of its
time); pyzmq speaks it when that module meets anything it does not expect, for a ``tcp://``
endpoint, and always with ``MEMCTL_TRANSPORT=pyzmq`` (or the hook's ``MEMCTL_HOOK_TRANSPORT``).
pyzmq's socket has LINGER 0 and IMMEDIATE 1: nothing queues for a daemon that is not there and
nothing blocks process exit.

On a timeout or a lost connection the request is sent once more on a fresh connection (the
daemon answers a repeated request id from its reply cache, so a retried ``remember`` is not
applied twice). The whole call never exceeds its budget; nobody listening ends it at once.
"""

from __future__ import annotations

import os
import time
from _thread import allocate_lock  # not threading: a command starts no thread
from typing import Any

import msgspec

from memctl import paths, protocol, zmtp

_CONTEXT_LOCK = allocate_lock()

DEFAULT_BUDGET_S = 1.5


class DaemonUnavailable(ConnectionError):
    """The daemon is not running, or did not answer within the budget."""

    def __init__(self, endpoint: str, reason: str) -> None:
        super().__init__(f"memoryd is not answering on {endpoint} ({reason})")
        self.endpoint = endpoint
        self.reason = reason


class MessageTooLarge(ValueError):
    """The encoded request is larger than the daemon accepts."""


def new_request_id() -> str:
    return os.urandom(16).hex()


class Client:
    """One client of the daemon, used for a single command or hook invocation."""

    def __init__(
        self, endpoint: str | None = None, budget_s: float = DEFAULT_BUDGET_S, *, wire: bool = True
    ) -> None:
        """``wire``: False for pyzmq only (the hook's own way, when the wire client failed)."""
        self.endpoint = endpoint or paths.endpoint()
        self.budget_s = budget_s
        self._ctx: Any = None  # pyzmq's context, made by the first attempt that needs it
        wire = wire and not paths.pyzmq_only()
        self._wire_path = paths.ipc_path(self.endpoint) if wire else None

    def close(self) -> None:
        with _CONTEXT_LOCK:
            ctx, self._ctx = self._ctx, None
        if ctx is not None:
            ctx.destroy(linger=0)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, request: protocol.Request[Any], budget_s: float | None = None) -> protocol.Reply:
        """Send ``request`` and return the daemon's reply, or raise ``DaemonUnavailable``."""
        if isinstance(request.id, int) and request.id == 0:
            request = msgspec.structs.replace(request, id=new_request_id())
        frame = protocol.encode(request)
        if len(frame) > protocol.MAX_MESSAGE_BYTES:
            raise MessageTooLarge(
                f"request is {len(frame)} bytes; the daemon accepts at most "
                f"{protocol.MAX_MESSAGE_BYTES} bytes per message"
            )
        self._check_socket_file()
        deadline = time.monotonic() + (budget_s if budget_s is not None else self.budget_s)
        attempts_left = 2
        while attempts_left:
            share = (deadline - time.monotonic()) / attempts_left
            attempts_left -= 1
            reply = self._attempt(frame, request.id, share, retry=attempts_left == 0)
            if reply is not None:
                return reply
        raise DaemonUnavailable(self.endpoint, "no reply within the time budget")

    def _check_socket_file(self) -> None:
        # A missing socket file means no daemon: say so at once instead of waiting out the budget.
        path = paths.ipc_path(self.endpoint)
        if path is not None and not os.path.exists(path):
            raise DaemonUnavailable(self.endpoint, "no socket")

    def _attempt(
        self, frame: bytes, request_id: object, timeout_s: float, *, retry: bool
    ) -> protocol.Reply | None:
        """The reply, or None when there is none (yet) to wait for in this attempt.

        Over the wire client first; pyzmq gets the attempt when the peer is not what that
        client expects (or its socket cannot be made), and on a retry that finds nobody
        listening: a daemon restarting under the command, which pyzmq waits for (reconnecting)
        until the deadline. Nobody listening at the first attempt ends the call at once."""
        if self._wire_path is not None:
            deadline = time.monotonic() + max(timeout_s, 0.0)
            try:
                frames = zmtp.request(self._wire_path, [frame], deadline)
            except zmtp.Unreachable:
                if not retry:
                    raise DaemonUnavailable(self.endpoint, "nobody listens") from None
            except zmtp.Lost:
                return None
            except zmtp.Unexpected:
                pass
            else:
                reply = _reply_of(frames, request_id)
                if reply is not None:
                    return reply
            timeout_s = deadline - time.monotonic()
        return self._attempt_pyzmq(frame, request_id, timeout_s)

    def _attempt_pyzmq(
        self, frame: bytes, request_id: object, timeout_s: float
    ) -> protocol.Reply | None:
        import zmq

        with _CONTEXT_LOCK:  # a Client serves the browser's and the MCP server's threads
            if self._ctx is None:
                self._ctx = zmq.Context()
        sock = self._ctx.socket(zmq.DEALER)
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.IMMEDIATE, 1)
            sock.connect(self.endpoint)
            deadline = time.monotonic() + max(timeout_s, 0.0)
            if not sock.poll(_ms_left(deadline), zmq.POLLOUT):
                return None
            sock.send(frame, zmq.NOBLOCK)
            while sock.poll(_ms_left(deadline), zmq.POLLIN):
                try:
                    reply = protocol.decode_reply(sock.recv(zmq.NOBLOCK))
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
                if reply.id == request_id:
                    return reply
            return None
        except zmq.ZMQError:
            return None
        finally:
            sock.close(linger=0)


def _reply_of(frames: list[bytes], request_id: object) -> protocol.Reply | None:
    """The reply ``frames`` hold to ``request_id``, or None for anything else."""
    if len(frames) != 1:
        return None
    try:
        reply = protocol.decode_reply(frames[0])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return reply if reply.id == request_id else None


def _ms_left(deadline: float) -> int:
    return max(0, int((deadline - time.monotonic()) * 1000))
