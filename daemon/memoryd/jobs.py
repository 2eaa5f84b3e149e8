"""Scheduled jobs. APScheduler's threads never touch state: each job only posts a ``Tick`` to the
owner thread's mailbox."""

from __future__ import annotations

from typing import Any

import zmq
from apscheduler.schedulers.background import BackgroundScheduler

from memoryd import messages

CAPTURE_IDLE_CHECK_S = 60.0
QUARANTINE_CHECK_S = 3600.0


class Jobs:
    def __init__(self, zctx: zmq.Context[Any], *, index_commit_s: float) -> None:
        self._zctx = zctx
        self._scheduler = BackgroundScheduler(daemon=True)
        self._scheduler.add_job(
            self._post,
            "interval",
            seconds=index_commit_s,
            args=["index_commit"],
            id="index_commit",
            coalesce=True,
            max_instances=1,
        )

    def _post(self, job: str) -> None:
        # One short-lived PUSH socket per tick: zmq sockets must not be shared across the
        # scheduler's worker threads, and a tick every few seconds costs nothing.
        sock = self._zctx.socket(zmq.PUSH)
        try:
            sock.setsockopt(zmq.LINGER, 1000)
            sock.connect(messages.INTERNAL_ENDPOINT)
            sock.send(messages.encode(messages.Tick(job)))
        finally:
            sock.close()

    def reschedule(self, *, index_commit_s: float) -> None:
        self._scheduler.reschedule_job("index_commit", trigger="interval", seconds=index_commit_s)

    def start(self) -> None:
        self._scheduler.start()

    def shutdown(self) -> None:
        self._scheduler.shutdown(wait=True)
