"""Internal messages travel a dispatch table like requests do: every message type the watcher,
the scheduler, the bank writer and the signals can post has exactly one handler, and every job the
scheduler ticks for has its work."""

from __future__ import annotations

import typing

import zmq

from memoryd import messages
from memoryd.jobs import Jobs
from memoryd.server.handlers.internal import INTERNAL_HANDLERS, JOBS


def test_every_internal_message_type_has_a_handler() -> None:
    assert set(INTERNAL_HANDLERS) == set(typing.get_args(messages.Internal))


def test_every_scheduled_job_has_its_work() -> None:
    ctx = zmq.Context()
    try:
        jobs = Jobs(ctx, index_commit_s=1.0)
        assert jobs.names == set(JOBS)
        assert "index_commit" in jobs.names  # the check saw the scheduler's jobs
    finally:
        ctx.term()
