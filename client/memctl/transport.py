"""Request/reply over ZeroMQ with a hard time budget (design §4 client transport).

A DEALER socket with LINGER 0 and IMMEDIATE 1: nothing queues for a daemon that is not there and
nothing blocks process exit. On a timeout the socket is closed and reopened and the request is
sent once more (the daemon answers a repeated request id from its reply cache, so a retried
``remember`` is not applied twice). The whole call never exceeds its budget.
"""

from __future__ import annotations

import os
import time
from typing import Any

import msgspec
import zmq

from memctl import paths, protocol

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

    def __init__(self, endpoint: str | None = None, budget_s: float = DEFAULT_BUDGET_S) -> None:
        self.endpoint = endpoint or paths.endpoint()
        self.budget_s = budget_s
        self._ctx = zmq.Context()

    def close(self) -> None:
        self._ctx.destroy(linger=0)

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
            reply = self._attempt(frame, request.id, share)
            if reply is not None:
                return reply
        raise DaemonUnavailable(self.endpoint, "no reply within the time budget")

    def _check_socket_file(self) -> None:
        # A missing socket file means no daemon: say so at once instead of waiting out the budget.
        path = paths.ipc_path(self.endpoint)
        if path is not None and not os.path.exists(path):
            raise DaemonUnavailable(self.endpoint, "no socket")

    def _attempt(self, frame: bytes, request_id: object, timeout_s: float) -> protocol.Reply | None:
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


def _ms_left(deadline: float) -> int:
    return max(0, int((deadline - time.monotonic()) * 1000))
