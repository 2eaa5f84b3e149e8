"""Internal messages: what watcher, scheduler and signal handling send to the owner thread over
``inproc://``. They never touch state themselves; the loop does, one message at a time."""

from __future__ import annotations

import msgspec

INTERNAL_ENDPOINT = "inproc://memoryd-internal"


class Tick(msgspec.Struct, tag="tick", frozen=True):
    """A scheduled job is due."""

    job: str


class StopRequested(msgspec.Struct, tag="stop", frozen=True):
    reason: str


class ReloadRequested(msgspec.Struct, tag="reload", frozen=True):
    pass


Internal = Tick | StopRequested | ReloadRequested

encode = msgspec.msgpack.Encoder().encode
decode = msgspec.msgpack.Decoder(Internal).decode
