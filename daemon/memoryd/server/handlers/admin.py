"""Handlers of the daemon itself: versions, status, the audit log, checks, shutdown."""

from __future__ import annotations

import os
import time
from typing import Any

import msgspec

from memctl import __version__
from memctl import protocol as p
from memoryd.health import rss_bytes
from memoryd.server.context import DaemonContext, Handler, Parked


def hello(ctx: DaemonContext, req: p.Hello) -> p.HelloResult:
    return p.HelloResult(protocol=p.PROTOCOL_VERSION, version=__version__, pid=os.getpid())


def status(ctx: DaemonContext, req: p.StatusRequest) -> p.StatusResult | Parked:
    """With ``wait_ms``, while long work is under way, the reply waits for it to end (run
    again then) or for the deadline, when the loop answers with the status of that last run."""
    here = req.project and (req.project_explicit or ctx.registry.resolves(req.project))
    project = ctx.registry.get(req.project) if here else None
    result = _status(ctx, project.info() if project is not None else None)
    if req.wait_ms == 0 or not result.work_under_way():
        return result

    def ended() -> bool:  # run after every loop turn: no query, only the two flags
        backlog = ctx.capture is not None and ctx.capture.backlog_pending()
        return not backlog and not (project is not None and project.index_rebuilding)

    return Parked(time.monotonic() + req.wait_ms / 1000, result, ready=ended)


def _status(ctx: DaemonContext, project: p.ProjectInfo | None) -> p.StatusResult:
    return p.StatusResult(
        daemon=p.DaemonInfo(
            version=__version__,
            protocol=p.PROTOCOL_VERSION,
            pid=os.getpid(),
            uptime_s=round(time.monotonic() - ctx.started, 3),
            socket=ctx.endpoint,
        ),
        project=project,
        slo=p.SloInfo(**msgspec.structs.asdict(ctx.recall.slo.state())),
        errors=ctx.errors.recent(),
        capture=ctx.capture.status() if ctx.capture else p.CaptureInfo(enabled=False),
    )


def audit_tail(ctx: DaemonContext, req: p.AuditTail) -> p.AuditResult | Parked:
    project = ctx.registry.get(req.project)
    events = project.audit_events(req.n, req.after_seq)
    if events or req.after_seq is None or req.wait_ms == 0:
        return p.AuditResult(events=events, last_seq=project.audit_last_seq())
    deadline = time.monotonic() + req.wait_ms / 1000
    seen = project.audit_last_seq()
    return Parked(
        deadline,
        p.AuditResult(events=[], last_seq=seen),
        ready=lambda: project.audit_last_seq() > seen,
    )


def health(ctx: DaemonContext, req: p.Health) -> p.HealthResult:
    here = req.project and (req.project_explicit or ctx.registry.resolves(req.project))
    index = ctx.registry.get(req.project).index_documents() if here else None
    now = time.time()
    return p.HealthResult(
        now=now,
        uptime_s=round(time.monotonic() - ctx.started, 3),
        slo_ms=ctx.recall.slo.degrade_above_ms,
        windows=ctx.health.windows(now),
        samples=ctx.health.newest(req.samples),
        degrade_events=list(ctx.recall.slo_events),
        slo=p.SloInfo(**msgspec.structs.asdict(ctx.recall.slo.state())),
        capture=ctx.capture.status() if ctx.capture else p.CaptureInfo(enabled=False),
        rss_bytes=rss_bytes(),
        index_documents=index,
        ring_size=len(ctx.health),
        ring_capacity=ctx.health.capacity,
    )


def check(ctx: DaemonContext, req: p.Check) -> p.CheckResult:
    project = ctx.registry.get(req.project)
    result = project.check(repair=req.repair)
    if ctx.banks is not None:
        result.bank, agrees = ctx.banks.check_journal(project.root, repair=req.repair)
        result.ok = result.ok and agrees
    return result


def shutdown(ctx: DaemonContext, req: p.Shutdown) -> p.ShutdownResult:
    ctx.request_stop("shutdown request")
    return p.ShutdownResult(stopping=True)


def projects_remove(ctx: DaemonContext, req: p.ProjectsRemove) -> p.ProjectRemovedResult:
    archived = ctx.registry.remove(req.path, time.time())
    return p.ProjectRemovedResult(path=os.path.realpath(req.path), archived_to=str(archived))


HANDLERS: dict[type[p.Request[Any]], Handler] = {
    p.Hello: hello,
    p.StatusRequest: status,
    p.AuditTail: audit_tail,
    p.Check: check,
    p.Health: health,
    p.Shutdown: shutdown,
    p.ProjectsRemove: projects_remove,
}
