"""Scheduled jobs. APScheduler's threads never touch state: each job only posts a ``Tick`` to the
owner thread's mailbox."""

from __future__ import annotations

from typing import Any

import zmq
from apscheduler.schedulers.background import BackgroundScheduler

from memoryd import messages

CAPTURE_IDLE_CHECK_S = 60.0
QUARANTINE_CHECK_S = 3600.0
COMPACTION_S = 3600.0


class Jobs:
    def __init__(
        self,
        zctx: zmq.Context[Any],
        *,
        index_commit_s: float,
        capture_idle_s: float = CAPTURE_IDLE_CHECK_S,
        quarantine_s: float = QUARANTINE_CHECK_S,
        bank_sync_s: float = 60.0,
        compaction_s: float = COMPACTION_S,
    ) -> None:
        self._zctx = zctx
        self._scheduler = BackgroundScheduler(daemon=True)
        self._intervals = {
            "index_commit": index_commit_s,  # also flushes access counts and capture cursors
            "socket": index_commit_s,  # the socket file is still there (a stat)
            "capture_idle": capture_idle_s,  # finalize sessions that went quiet
            "quarantine": quarantine_s,  # review candidates past their 24 h
            "bank_sync": bank_sync_s,  # write the bank cache's pending changes
            "compaction": compaction_s,  # decay, TTL, eviction, purge (§8); bank budget (§10)
        }
        for job, seconds in self._intervals.items():
            self._scheduler.add_job(
                self._post,
                "interval",
                seconds=seconds,
                args=[job],
                id=job,
                coalesce=True,
                max_instances=1,
            )

    def jobs(self) -> list[str]:
        return [job.id for job in self._scheduler.get_jobs()]

    def _post(self, job: str) -> None:
        messages.post(self._zctx, messages.Tick(job))

    def reschedule(
        self,
        *,
        index_commit_s: float,
        capture_idle_s: float,
        quarantine_s: float,
        bank_sync_s: float,
        compaction_s: float = COMPACTION_S,
    ) -> None:
        """New intervals (SIGHUP); a job whose interval is unchanged keeps its next run time."""
        for job, seconds in (
            ("index_commit", index_commit_s),
            ("socket", index_commit_s),
            ("capture_idle", capture_idle_s),
            ("quarantine", quarantine_s),
            ("bank_sync", bank_sync_s),
            ("compaction", compaction_s),
        ):
            if seconds != self._intervals[job]:
                self._scheduler.reschedule_job(job, trigger="interval", seconds=seconds)
                self._intervals[job] = seconds

    @property
    def names(self) -> frozenset[str]:
        """The jobs this scheduler posts ticks for."""
        return frozenset(self._intervals)

    def start(self) -> None:
        self._scheduler.start()

    def shutdown(self) -> None:
        self._scheduler.shutdown(wait=True)
