"""Crash durability: SIGKILL the real daemon at random moments while a client writes, restart it,
and prove that nothing acknowledged was lost and nothing on disk is damaged (SPEC §3).

A write counts as acknowledged only when an ``Ok`` reply came back. A write that got no reply
(``DaemonUnavailable``) may or may not have been applied; either is allowed, but whatever was
applied must be whole. Kill points come from a seeded ``random.Random``, so a failure replays
the same sequence of delays; each delay is measured from the moment the (re)started daemon
answered ``hello``, and is waited out on an event, never by a blind sleep.

The streams are marked ``slow``: by default each runs the first cycles of its seeded sequence,
and ``--full`` (or ``MEMORYD_FULL=1``) runs all of them.
"""

from __future__ import annotations

import random
import re
import signal
import sqlite3
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from conftest import Daemon, Env, ok_json
from memctl import protocol
from memctl.transport import Client, DaemonUnavailable
from memoryd.core import audit_chain

SEED = 20_240_611
MAX_KILL_DELAY_S = 0.150
REMEMBER_BUDGET_S = 0.6
IMPORT_LINES = 2_000  # several of the daemon's internal import batches
BULK_BUDGET_S = 30.0


@dataclass(frozen=True)
class Cycles:
    """How many times each stream kills the daemon."""

    remember: int
    imports: int
    bank: int


FULL = Cycles(remember=25, imports=8, bank=10)
QUICK = Cycles(remember=10, imports=4, bank=5)


@pytest.fixture
def cycles(full: bool) -> Cycles:
    return FULL if full else QUICK


def _endpoint(env: Env) -> str:
    return "ipc://" + str(env.socket)


def _call(env: Env, request: protocol.Request, budget_s: float = BULK_BUDGET_S) -> Any:
    request.project = str(env.project)
    with Client(endpoint=_endpoint(env), budget_s=budget_s) as client:
        reply = client.call(request)
    assert isinstance(reply, protocol.Ok), reply
    return msgspec.to_builtins(protocol.result_of(request, reply))


# --------------------------------------------------------------------------- the writer


@dataclass
class Outcome:
    """One request and what came back for it."""

    payload: str  # the remembered content, or the tag of an import request
    cycle: int
    result: Any = None  # the Ok result; None while unacknowledged
    error: protocol.Error | None = None


class Writer(threading.Thread):
    """Streams requests from its own thread and client until ``stop``. It starts a request only
    while ``up`` is set, so it does not spin while the daemon is being restarted, and holds
    ``busy`` for the length of each call, so the main thread can wait out the call in flight."""

    def __init__(
        self,
        env: Env,
        make_request: Callable[[int], tuple[str, protocol.Request]],
        budget_s: float,
    ) -> None:
        super().__init__(name="durability-writer", daemon=True)
        self.env = env
        self.make_request = make_request
        self.budget_s = budget_s
        self.up = threading.Event()
        self.stop = threading.Event()
        self.busy = threading.Lock()
        self.cycle = 0
        self.outcomes: list[Outcome] = []
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            with Client(endpoint=_endpoint(self.env), budget_s=self.budget_s) as client:
                n = 0
                while not self.stop.is_set():
                    if not self.up.wait(timeout=0.5):
                        continue
                    with self.busy:
                        if self.stop.is_set() or not self.up.is_set():
                            continue
                        payload, request = self.make_request(n)
                        n += 1
                        outcome = Outcome(payload, self.cycle)
                        self.outcomes.append(outcome)
                        try:
                            reply = client.call(request)
                        except DaemonUnavailable:
                            continue
                        if isinstance(reply, protocol.Ok):
                            outcome.result = msgspec.to_builtins(protocol.result_of(request, reply))
                        else:
                            outcome.error = reply
        except BaseException as exc:  # re-raised by finish()
            self.failure = exc

    def finish(self) -> None:
        self.stop.set()
        self.up.set()
        self.join(timeout=30)
        assert not self.is_alive(), "writer thread did not stop"
        if self.failure is not None:
            raise self.failure

    @property
    def acked(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.result is not None]

    @property
    def unacked(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.result is None]

    def errors(self) -> list[protocol.Error]:
        return [o.error for o in self.outcomes if o.error is not None]


# --------------------------------------------------------------------------- the killer


class Killer:
    """Owns the daemon across kills: whatever happens, ``close`` leaves no daemon running."""

    def __init__(self, env: Env, extra: dict[str, str] | None = None) -> None:
        self.env = env
        self.extra = extra
        self.daemon = Daemon(env, extra)
        self.kills = 0

    def start(self) -> Killer:
        self.daemon.start()
        return self

    def run(
        self,
        writer: Writer,
        cycles: int,
        rng: random.Random,
        *,
        max_delay_s: float = MAX_KILL_DELAY_S,
        open_project_first: bool = False,
        settle_before_restart: bool = False,
    ) -> None:
        """``cycles`` times: let the writer run for a random delay, SIGKILL the daemon, start a
        new one. ``open_project_first`` opens the project (recovery, replay, index catch-up)
        before the delay starts, so the kill lands in the writes rather than in the open.
        ``settle_before_restart`` lets the request in flight at the kill give up before the next
        daemon starts, so the client's retry cannot finish it there: what is checked is exactly
        what the dead daemon left behind."""
        never = threading.Event()  # waited on with a timeout: a bounded, random kill point
        writer.start()
        try:
            for cycle in range(cycles):
                if open_project_first:
                    _call(self.env, protocol.StatusRequest())
                writer.cycle = cycle
                writer.up.set()
                never.wait(timeout=rng.uniform(0.0, max_delay_s))
                writer.up.clear()
                code = self.daemon.stop(signal.SIGKILL)
                assert code == -signal.SIGKILL, (
                    f"daemon exited with {code} before the kill:\n{self.daemon.log()}"
                )
                self.kills += 1
                if settle_before_restart:
                    with writer.busy:
                        pass
                self.daemon = Daemon(self.env, self.extra)
                self.daemon.start()
            writer.cycle = cycles
        finally:
            writer.finish()

    def close(self) -> None:
        proc = self.daemon.proc
        if proc is not None and proc.poll() is None:
            self.daemon.stop(signal.SIGKILL)


# --------------------------------------------------------------------------- checks


def export_entries(env: Env) -> dict[str, Any]:
    return {e["id"]: e for e in _call(env, protocol.Export())["entries"]}


def assert_check_ok(env: Env) -> None:
    check = ok_json(env, "check")
    assert check == {"ok": True, "database": "ok", "audit": "ok", "index": "ok"}, check


def assert_clean_on_disk(
    env: Env, daemon: Daemon, slug: str, entries: int
) -> audit_chain.ChainReport:
    """Stop the daemon cleanly, then inspect its files directly: SQLite integrity, the audit hash
    chain, and the store having applied exactly up to the journal's last event."""
    assert daemon.stop() == 0, f"daemon did not stop cleanly:\n{daemon.log()}"
    project_dir = env.data / "projects" / slug
    conn = sqlite3.connect(project_dir / "memory.db")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        applied = int(conn.execute("SELECT value FROM meta WHERE key='audit_seq'").fetchone()[0])
        assert conn.execute("SELECT count(*) FROM entries").fetchone()[0] == entries
    finally:
        conn.close()
    lines = (project_dir / "audit.jsonl").read_bytes().splitlines()
    report = audit_chain.verify(lines)
    assert report.ok, report.problem
    assert report.events == len(lines) > 0
    # Nothing journaled is left unapplied, and the store never ran ahead of the journal.
    assert report.last_seq == applied, (
        f"journal ends at seq {report.last_seq}, store applied {applied}"
    )
    return report


def journaled_entry_ids(path: Path) -> set[str]:
    ids: set[str] = set()
    for line in path.read_bytes().splitlines():
        event = msgspec.json.decode(line)["event"]
        if event["type"] == "entry_added":
            ids.add(event["entry"]["id"])
        elif event["type"] == "entries_imported":
            ids.update(e["id"] for e in event["entries"])
    return ids


# --------------------------------------------------------------------------- tests


@pytest.mark.slow
def test_sigkill_during_remember_stream_loses_nothing_acknowledged(
    env: Env, cycles: Cycles
) -> None:
    started = time.monotonic()
    rng = random.Random(SEED)
    run = uuid.uuid4().hex[:8]

    def remember(n: int) -> tuple[str, protocol.Request]:
        content = f"durability fact {n} {run} {uuid.uuid4().hex}"
        return content, protocol.Remember(content=content, project=str(env.project))

    writer = Writer(env, remember, REMEMBER_BUDGET_S)
    killer = Killer(env)
    try:
        # Open the project before each random delay so the kills land among the writes, not in
        # the start-up (which on a loaded machine can take most of a 150 ms window).
        killer.start().run(writer, cycles.remember, rng, open_project_first=True)
        assert killer.kills == cycles.remember
        assert writer.errors() == [], (
            f"the daemon answered remembers with errors: {writer.errors()[:3]}"
        )
        acked = writer.acked
        sent = {o.payload for o in writer.outcomes}
        # The stream really ran into the kills: writes were acknowledged across the cycles.
        assert len(acked) >= cycles.remember, len(acked)
        assert len({o.cycle for o in acked}) >= max(2, cycles.remember // 5)

        status = ok_json(env, "status")
        slug = status["project"]["slug"]
        entries = export_entries(env)

        # Every acknowledged write is there, under the id it was acknowledged with, verbatim.
        ack_ids = {o.payload: o.result["id"] for o in acked}
        assert len(set(ack_ids.values())) == len(ack_ids), "two acknowledged writes share an id"
        missing = [(c, i) for c, i in ack_ids.items() if i not in entries]
        assert missing == [], f"{len(missing)} acknowledged entries lost, e.g. {missing[:3]}"
        changed = [
            (c, entries[i]["content"]) for c, i in ack_ids.items() if entries[i]["content"] != c
        ]
        assert changed == [], f"acknowledged entries changed: {changed[:3]}"
        assert len(entries) >= len(acked)
        # Whatever else survived is one of our unacknowledged writes, whole and not doubled.
        contents = Counter(e["content"] for e in entries.values())
        assert set(contents) <= sent, f"entries nobody wrote: {sorted(set(contents) - sent)[:3]}"
        assert max(contents.values()) == 1, "a write was applied twice"
        assert sum(status["project"]["entries"].values()) == len(entries)

        # Read-your-writes through the index after the restarts: the last acknowledged write
        # before each kill (the one most at risk) and a random sample of the rest are found.
        last_per_cycle = {o.cycle: o for o in acked}
        sample = {
            o.payload: o
            for o in (*last_per_cycle.values(), *rng.sample(acked, min(60, len(acked))))
        }
        with Client(endpoint=_endpoint(env), budget_s=5.0) as client:
            for outcome in sample.values():
                token = outcome.payload.rsplit(" ", 1)[1]
                search = protocol.Search(query=token, k=3, project=str(env.project))
                reply = client.call(search)
                assert isinstance(reply, protocol.Ok), reply
                found = [r.id for r in protocol.result_of(search, reply).results]
                assert outcome.result["id"] in found, f"search misses {outcome.payload!r}: {found}"

        assert_check_ok(env)
        report = assert_clean_on_disk(env, killer.daemon, slug, len(entries))
        # Journal-first: every acknowledged entry is in the journal (no trim at this size).
        assert report.first_seq == 1
        journaled = journaled_entry_ids(env.data / "projects" / slug / "audit.jsonl")
        assert set(ack_ids.values()) <= journaled
    finally:
        killer.close()
    applied_unacked = len(entries) - len(acked)
    absent = len(writer.unacked) - applied_unacked
    print(
        f"\n{killer.kills} kills in {time.monotonic() - started:.1f}s: "
        f"{len(writer.outcomes)} remembers, {len(acked)} acknowledged, "
        f"{applied_unacked} unacknowledged but applied, {absent} unacknowledged and absent; "
        f"audit seq {report.last_seq}"
    )


@pytest.mark.slow
def test_sigkill_during_import_keeps_each_request_whole(env: Env, cycles: Cycles) -> None:
    started = time.monotonic()
    rng = random.Random(SEED + 1)
    run = uuid.uuid4().hex[:8]

    def import_request(n: int) -> tuple[str, protocol.Request]:
        tag = f"imp{n}x{run}"
        lines = [
            f'{{"content": "imported fact {tag} line {k} {uuid.uuid4().hex}"}}'
            for k in range(IMPORT_LINES)
        ]
        return tag, protocol.Import(lines=lines, project=str(env.project))

    killer = Killer(env)
    try:
        killer.start()
        # Calibrate on this machine: one import, not killed, sets the kill window (so kills land
        # in imports and some imports complete) and the client budget (so a slow machine still
        # gets its answers in time).
        _call(env, protocol.StatusRequest())
        tag, request = import_request(-1)
        t0 = time.monotonic()
        first = _call(env, request)
        took = time.monotonic() - t0
        assert first == {"imported": IMPORT_LINES, "duplicates": 0, "rejected": []}

        writer = Writer(env, import_request, budget_s=max(0.4, 3 * took))
        killer.run(
            writer,
            cycles.imports,
            rng,
            max_delay_s=3 * took,
            open_project_first=True,
            settle_before_restart=True,
        )
        assert writer.errors() == [], (
            f"the daemon answered imports with errors: {writer.errors()[:3]}"
        )
        # The kills did land in imports: the request in flight at each kill went unanswered.
        assert len(writer.unacked) >= cycles.imports // 2

        slug = ok_json(env, "status")["project"]["slug"]
        entries = export_entries(env)
        per_request = Counter(e["content"].split(" ")[2] for e in entries.values())
        assert set(per_request) <= {tag} | {o.payload for o in writer.outcomes}
        assert per_request[tag] == IMPORT_LINES

        for outcome in writer.acked:
            result = outcome.result
            assert result is not None and result["rejected"] == []
            assert result["imported"] + result["duplicates"] == IMPORT_LINES
            assert per_request[outcome.payload] == IMPORT_LINES, (
                f"acknowledged import {outcome.payload} has {per_request[outcome.payload]} of "
                f"{IMPORT_LINES} entries"
            )
        # An import the daemon died in is all or nothing: never a part of the request.
        partial = {
            o.payload: per_request[o.payload]
            for o in writer.unacked
            if per_request[o.payload] not in (0, IMPORT_LINES)
        }
        assert partial == {}, (
            f"unacknowledged imports of {IMPORT_LINES} lines left partly applied "
            f"(entries each): {partial}"
        )

        assert_check_ok(env)
        assert_clean_on_disk(env, killer.daemon, slug, len(entries))
    finally:
        killer.close()
    print(
        f"\n{killer.kills} kills in {time.monotonic() - started:.1f}s "
        f"(calibration import {took * 1000:.0f} ms): "
        f"{len(writer.outcomes)} imports, {len(writer.acked)} acknowledged, unacknowledged ones "
        f"left {[per_request[o.payload] for o in writer.unacked]} entries"
    )


MAX_BANK_KILL_DELAY_S = 0.400  # several updates and, at a 50 ms interval, several syncs


@pytest.mark.slow
def test_sigkill_during_bank_updates_and_syncs_loses_and_doubles_nothing(
    env: Env, cycles: Cycles
) -> None:
    """Bank changes are acknowledged once journaled and written by the writer thread later; kills
    land before, during and after those writes. Every acknowledged decision is in decisionLog.md
    on disk exactly once, in the order sent; one that got no answer at most once."""
    rng = random.Random(SEED + 2)
    run = uuid.uuid4().hex[:8]

    def decision(n: int) -> tuple[str, protocol.Request]:
        title = f"Kill {n:03d} {run}"
        content = f"## Decision: {title}\n\n- **Status**: Accepted\n- **Decision**: {n}.\n"
        return title, protocol.BankUpdate(
            name="decisionLog.md", content=content, project=str(env.project)
        )

    killer = Killer(env, {"MEMORYD_BANKS__SYNC_INTERVAL_S": "0.05"})
    writer = Writer(env, decision, REMEMBER_BUDGET_S)
    try:
        killer.start()
        _call(env, protocol.BankInit())
        # The request in flight at a kill may be retried by the client against the next daemon:
        # journaled with its request id, it is recognised there and not appended twice.
        killer.run(
            writer,
            cycles.bank,
            rng,
            max_delay_s=MAX_BANK_KILL_DELAY_S,
            open_project_first=True,
        )
        assert writer.errors() == [], writer.errors()[:3]
        acked = [o.payload for o in writer.acked]
        assert len(acked) >= cycles.bank, len(acked)
        assert _call(env, protocol.BankSync()) == {"pending": 0, "writing": False}
    finally:
        killer.close()
    text = (env.project / "memory-bank" / "decisionLog.md").read_text()
    on_disk = re.findall(rf"## Decision: (Kill \d+ {run})", text)
    counts = Counter(on_disk)
    assert all(counts[title] == 1 for title in acked), [t for t in acked if counts[t] != 1]
    assert all(n <= 1 for n in counts.values()), counts.most_common(3)
    assert on_disk == sorted(on_disk)  # in the order sent
    assert set(on_disk) <= {o.payload for o in writer.outcomes}
