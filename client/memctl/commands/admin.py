"""Commands about the daemon itself: status, versions, the audit log, checks, shutdown."""

from __future__ import annotations

import argparse
import sys
import time

from memctl import __version__, protocol, render
from memctl.cli import BULK_BUDGET_S, EXIT_OK, EXIT_UNAVAILABLE, Failed, Session
from memctl.commands import Commands, lazy
from memctl.transport import Client, DaemonUnavailable

FOLLOW_WAIT_MS = 25_000
# How long the daemon holds a `status --wait` poll while the work goes on: the bar's refresh.
WATCH_WAIT_MS = 500


def register(c: Commands) -> None:
    p = c.add("status", cmd_status, protocol.StatusRequest)
    p.add_argument(
        "--wait",
        action="store_true",
        help="wait until an index rebuild and the transcript backlog are done (a progress bar "
        "on a terminal); with --timeout S, give up after S s",
    )
    c.add("version", cmd_version, protocol.Hello, help="memctl's and the daemon's versions")
    p = c.add("audit", cmd_audit, protocol.AuditTail, help="show the audit log, a JSON line each")
    p.add_argument("-n", type=int, default=20)
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    p = c.add("check", cmd_check, protocol.Check)
    p.add_argument(
        "--repair",
        action="store_true",
        help="rebuild what is derived: the search index, the bank journal from the bank cache",
    )
    c.add("health", cmd_health, protocol.Health)
    p = c.add("ui", lazy("memctl.ui.command", "cmd_ui"), help="open the memory browser")
    p.add_argument("--port", type=int, default=0, help="listen on this port (default: a free one)")
    p.add_argument("--no-browser", action="store_true", help="print the address only")
    c.add("shutdown", cmd_shutdown, protocol.Shutdown)


def cmd_status(s: Session) -> None:
    deadline = time.monotonic() + s.args.timeout if s.args.timeout else None
    result = s.call(protocol.StatusRequest())
    if not s.args.wait:
        s.emit(result, render.status)
        return
    result, ended = _wait(s, result, deadline)
    s.emit(result, render.status)
    if not ended:
        raise Failed(f"still under way after {s.args.timeout:g} s", error="timeout")


def _wait(
    s: Session, result: protocol.StatusResult, deadline: float | None
) -> tuple[protocol.StatusResult, bool]:
    """Poll until no long work is under way (each poll waits in the daemon, not here), until
    ``deadline`` (``--timeout`` for the whole command) when given; returns the last status and
    whether the work ended."""
    from memctl import progress  # tqdm: loaded by this command alone

    work = progress.DaemonWork(shown=not s.as_json)
    try:
        while True:
            work.show(result)
            if not result.work_under_way():
                return result, True
            wait_ms = WATCH_WAIT_MS
            if deadline is not None:
                left_ms = int((deadline - time.monotonic()) * 1000)
                if left_ms <= 0:
                    return result, False
                # Half of what is left: the reply has the other half (each call's budget is
                # --timeout too) to be computed and come back.
                wait_ms = min(wait_ms, left_ms // 2 + 1)
            request = protocol.StatusRequest(wait_ms=wait_ms)
            result = s.call(request, BULK_BUDGET_S + wait_ms / 1000)
    finally:
        work.close()


def cmd_version(s: Session) -> None:
    s.emit(s.call(protocol.Hello(client_version=__version__)), render.version)


def print_version(args: argparse.Namespace) -> int:
    """``memctl --version``: memctl's version, and the daemon's when it answers."""
    print(f"memctl {__version__} (protocol {protocol.PROTOCOL_VERSION})")
    with Client(budget_s=args.timeout or 1.5) as client:
        try:
            reply = client.call(protocol.Hello(client_version=__version__))
        except DaemonUnavailable:
            print("memoryd is not running", file=sys.stderr)
            return EXIT_UNAVAILABLE
    if isinstance(reply, protocol.Ok):
        try:
            print(render.version(protocol.result_of(protocol.Hello(), reply)))
        except ValueError:  # msgspec's errors: a daemon of another protocol
            print("memoryd answered in another protocol: restart it", file=sys.stderr)
    return EXIT_OK


def cmd_audit(s: Session) -> None:
    result = s.call(protocol.AuditTail(n=s.args.n))
    _print_events(result.events)
    last = result.last_seq
    while s.args.follow:
        request = protocol.AuditTail(n=10_000, after_seq=last, wait_ms=FOLLOW_WAIT_MS)
        result = s.call(request, FOLLOW_WAIT_MS / 1000 + 5)
        _print_events(result.events)
        last = max([last, result.last_seq, *(e.seq for e in result.events)])


def _print_events(events: list[protocol.AuditEvent]) -> None:
    for event in events:
        sys.stdout.write(event.line + "\n")
    sys.stdout.flush()


def cmd_health(s: Session) -> None:
    s.emit(s.call(protocol.Health()), render.health)


def cmd_check(s: Session) -> None:
    result = s.call(protocol.Check(repair=s.args.repair), BULK_BUDGET_S)
    s.emit(result, render.checked)
    if not result.ok:
        raise Failed("check found problems")


def cmd_shutdown(s: Session) -> None:
    s.emit(s.call(protocol.Shutdown()), render.shutdown)
