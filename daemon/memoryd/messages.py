"""Internal messages: what watcher, scheduler and signal handling send to the owner thread over
``inproc://``. They never touch state themselves; the loop does, one message at a time."""

from __future__ import annotations

from typing import Any

import msgspec
import zmq

INTERNAL_ENDPOINT = "inproc://memoryd-internal"


class Tick(msgspec.Struct, tag="tick", frozen=True):
    """A scheduled job is due."""

    job: str


class FileChanged(msgspec.Struct, tag="file_changed", frozen=True):
    """A watched transcript changed (sent by the watcher thread, debounced)."""

    path: str


class BanksWritten(msgspec.Struct, tag="banks_written", frozen=True):
    """The bank writer thread has results to collect."""


class SharesWritten(msgspec.Struct, tag="shares_written", frozen=True):
    """The shared-file writer thread has results to collect."""


class Wake(msgspec.Struct, tag="wake", frozen=True):
    """Work a parked request waits on finished on another thread (an LLM answer): look again."""


class StopRequested(msgspec.Struct, tag="stop", frozen=True):
    reason: str


class ReloadRequested(msgspec.Struct, tag="reload", frozen=True):
    pass


Internal = (
    Tick | FileChanged | BanksWritten | SharesWritten | Wake | StopRequested | ReloadRequested
)

encode = msgspec.msgpack.Encoder().encode
decode = msgspec.msgpack.Decoder(Internal).decode


def post(zctx: zmq.Context[Any], message: Internal) -> None:
    """Send ``message`` to the owner thread from any other thread. One short-lived PUSH socket
    per call: zmq sockets must not be shared between threads, and inproc sockets are cheap."""
    sock = zctx.socket(zmq.PUSH)
    try:
        sock.setsockopt(zmq.LINGER, 1000)
        sock.connect(INTERNAL_ENDPOINT)
        sock.send(encode(message))
    finally:
        sock.close()
