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

import contextlib
import json
import os
import random
import re
import signal
import sqlite3
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest

from conftest import Daemon, Env, ok_json, until
from memctl import protocol
from memctl.transport import Client, DaemonUnavailable
from memoryd.core import audit_chain

SEED = 20_240_611
MAX_KILL_DELAY_S = 0.150
REMEMBER_BUDGET_S = 0.6
IMPORT_LINES = protocol.IMPORT_MAX_LINES  # the most one request may carry
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
        self.restarts_s: list[float] = []  # from the kill to the new daemon's first answer

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
        after_restart: Callable[[], None] | None = None,
    ) -> None:
        """``cycles`` times: let the writer run for a random delay, SIGKILL the daemon, start a
        new one. ``open_project_first`` opens the project (recovery, replay, index catch-up)
        before the delay starts, so the kill lands in the writes rather than in the open.
        ``settle_before_restart`` lets the request in flight at the kill give up before the next
        daemon starts, so the client's retry cannot finish it there: what is checked is exactly
        what the dead daemon left behind. ``after_restart`` runs once each new daemon answers,
        before the writer goes on (the checks of what the kill left)."""
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
                killed_at = time.monotonic()
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
                self.restarts_s.append(time.monotonic() - killed_at)
                if after_restart is not None:
                    after_restart()
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
    assert check == {"ok": True, "database": "ok", "audit": "ok", "index": "ok", "bank": "ok"}, (
        check
    )


def assert_clean_on_disk(
    env: Env, daemon: Daemon, slug: str, entries: int | None
) -> audit_chain.ChainReport:
    """Stop the daemon cleanly, then inspect its files directly: SQLite integrity, the audit hash
    chain, and the store having applied exactly up to the journal's last event (and holding
    ``entries`` entries, unless None)."""
    assert daemon.stop() == 0, f"daemon did not stop cleanly:\n{daemon.log()}"
    project_dir = env.data / "projects" / slug
    conn = sqlite3.connect(project_dir / "memory.db")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        applied = int(conn.execute("SELECT value FROM meta WHERE key='audit_seq'").fetchone()[0])
        if entries is not None:
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


# --------------------------------------------------------------------------- the full mix

# Kills of the mixed stream: MEMORYD_KILLS sets it; the full run (--full) does 120, the default a
# short stream from the same seed (each kill costs a daemon start, ~0.5 s on an idle machine).
MIX_KILLS_FULL = 120
MIX_KILLS_QUICK = 12
MIX_MAX_KILL_DELAY_S = 0.250
MIX_IMPORT_LINES = 10
MIX_OP_DEADLINE_S = 120.0  # one operation retried across restarts gets its answer within this
DAY = 86_400.0
MIX_WEIGHTS = {
    "remember": 30,
    "import": 8,
    "forget": 8,
    "pin": 8,
    "bank_update": 15,
    "bank_write": 6,
    "bank_sync": 5,
    "capture": 12,
    "compact": 4,
}
MIX_SESSION = "7a1c2e3f-4b5d-4e6f-8a9b-0c1d2e3f4a5b"


def _mix_kills(full: bool) -> int:
    named = os.environ.get("MEMORYD_KILLS", "")
    return int(named) if named else (MIX_KILLS_FULL if full else MIX_KILLS_QUICK)


@pytest.fixture
def mix_kills(full: bool) -> int:
    return _mix_kills(full)


# pytest-timeout's limit, set when the module is read: by the kills the run will do (the
# stream's own waits are each bounded; this only catches what they do not).
_MIX_TIMEOUT_S = 60 + 6 * _mix_kills(
    os.environ.get("MEMORYD_FULL", "") not in ("", "0") or "--full" in sys.argv
)


@dataclass
class MixOp:
    """One operation of the mixed stream, sent again with the same request id after each
    ``unavailable`` (a kill) until the daemon answers it."""

    kind: str
    key: str  # what the end state is checked by: content, import tag, entry id, title, token
    request: protocol.Request | None  # None: a transcript append, the test's own write
    cycles: set[int] = field(default_factory=set)  # the kill cycles its attempts fell in
    kills: tuple[int, int] = (0, 0)  # the kills so far when first sent, when answered
    result: Any = None
    error: protocol.Error | None = None

    @property
    def crossed_a_restart(self) -> bool:
        """Answered by another daemon than the one it was first sent to (by our retry, or
        the client's own second attempt)."""
        return len(self.cycles) > 1 or self.kills[0] != self.kills[1]


class MixedClient(Writer):
    """The full mix of mutating operations from one client, in a seeded random order. Unlike
    ``Writer`` it never gives an operation up: after ``unavailable`` it waits for the next
    daemon and sends the same request, same id, again. Exactly once is what is proven: the
    retry of a change the dead daemon had applied must not apply it a second time."""

    def __init__(self, env: Env, rng: random.Random, run: str, transcript: Path) -> None:
        super().__init__(env, lambda n: ("", protocol.Hello()), REMEMBER_BUDGET_S)
        self.rng = rng
        self.run_tag = run
        self.transcript = transcript
        self.ops: list[MixOp] = []
        self.remembered: list[str] = []  # ids of acknowledged remembers
        self.pinned: set[str] = set()
        self.forgotten: set[str] = set()
        self.restarts_crossed = 0
        self.kills: Callable[[], int] = lambda: 0  # the killer's count, set by the test

    def _request(self, kind: str, request: protocol.Request) -> protocol.Request:
        request.id = uuid.uuid4().hex  # fixed now: every attempt carries it
        request.project = str(self.env.project)
        return request

    def next_op(self, n: int) -> MixOp:
        kinds, weights = zip(*MIX_WEIGHTS.items(), strict=True)
        kind = self.rng.choices(kinds, weights)[0]
        free = [i for i in self.remembered if i not in self.pinned and i not in self.forgotten]
        if kind in ("forget", "pin") and not free:
            kind = "remember"
        token = f"{n}x{self.run_tag}x{uuid.uuid4().hex[:12]}"
        match kind:
            case "remember":
                content = f"killstream fact {token}"
                return MixOp(kind, content, self._request(kind, protocol.Remember(content=content)))
            case "import":
                now = time.time()
                lines = [
                    msgspec.json.encode(
                        {"content": f"imported fact {token} line {k}"}
                        if k % 2
                        else {  # backdated progress: compaction's TTL archives it
                            "content": f"imported fact {token} line {k}",
                            "category": "task_progress",
                            "created_at": now - 200 * DAY,
                        }
                    ).decode()
                    for k in range(MIX_IMPORT_LINES)
                ]
                return MixOp(kind, token, self._request(kind, protocol.Import(lines=lines)))
            case "forget" | "pin":
                target = self.rng.choice(free)
                (self.forgotten if kind == "forget" else self.pinned).add(target)
                request = (
                    protocol.Forget(target=target)
                    if kind == "forget"
                    else protocol.Pin(target=target)
                )
                return MixOp(kind, target, self._request(kind, request))
            case "bank_update":
                title = f"Kill {n:05d} {self.run_tag}"
                content = f"## Decision: {title}\n\n- **Status**: Accepted\n- **Decision**: {n}.\n"
                request = protocol.BankUpdate(name="decisionLog.md", content=content)
                return MixOp(kind, title, self._request(kind, request))
            case "bank_write":
                text = f"# Active Context\n\nstep {token}\n"
                request = protocol.BankWrite(name="activeContext.md", content=text)
                return MixOp(kind, text, self._request(kind, request))
            case "bank_sync":
                return MixOp(kind, "", self._request(kind, protocol.BankSync(wait_ms=200)))
            case "compact":
                return MixOp(kind, "", self._request(kind, protocol.Compact()))
            case _:
                assert kind == "capture", kind
                return MixOp(kind, token, None)

    def _append_transcript(self, n: int, token: str) -> None:
        records = [
            _claude_record(self.env, "user", f"what should the retry queue use? ({token})", n, 0),
            _claude_record(
                self.env,
                "assistant",
                # Words of its own: near-duplicate statements are one finding.
                f"We decided to use {token} around q{uuid.uuid4().hex[:8]} "
                f"z{uuid.uuid4().hex[:8]} refresh.",
                n,
                1,
            ),
        ]
        with open(self.transcript, "a", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in records))

    def run(self) -> None:
        try:
            with Client(endpoint=_endpoint(self.env), budget_s=self.budget_s) as client:
                n = 0
                while not self.stop.is_set():
                    op = self.next_op(n)
                    self.ops.append(op)
                    self._until_answered(client, op, n)
                    n += 1
        except BaseException as exc:  # re-raised by finish()
            self.failure = exc

    def _until_answered(self, client: Client, op: MixOp, n: int) -> None:
        deadline = time.monotonic() + MIX_OP_DEADLINE_S
        first = self.kills()
        while time.monotonic() < deadline:
            if not self.up.wait(timeout=0.5):
                continue
            with self.busy:
                if not self.up.is_set():
                    continue
                op.cycles.add(self.cycle)
                if op.request is None:
                    self._append_transcript(n, op.key)
                    return
                try:
                    reply = client.call(op.request)
                except DaemonUnavailable:
                    continue  # the same request again, to the next daemon
                op.kills = (first, self.kills())
                if isinstance(reply, protocol.Ok):
                    op.result = msgspec.to_builtins(protocol.result_of(op.request, reply))
                    if op.kind == "remember":
                        self.remembered.append(op.result["id"])
                else:
                    op.error = reply
                if op.crossed_a_restart:
                    self.restarts_crossed += 1
                return
        raise AssertionError(f"{op.kind} {op.key} not answered within {MIX_OP_DEADLINE_S}s")


def _claude_record(env: Env, role: str, text: str, n: int, k: int) -> dict[str, Any]:
    content: Any = text if role == "user" else [{"type": "text", "text": text}]
    return {
        "type": role,
        "sessionId": MIX_SESSION,
        "cwd": str(env.project),
        "uuid": f"{role[0]}{n}-{k}",
        "timestamp": f"2026-11-21T10:{n // 60 % 60:02d}:{n % 60:02d}Z",
        "message": {"role": role, "content": content},
    }


def _claude_transcript(env: Env) -> Path:
    folder = (
        env.home / ".claude" / "projects" / ("-" + str(env.project).strip("/").replace("/", "-"))
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{MIX_SESSION}.jsonl"


def _written_by(content: str) -> str:
    """The key of the operation of the mixed stream that wrote an entry: an import's tag, or a
    remember's content."""
    return content.split(" ")[2] if content.startswith("imported fact ") else content


def _healed_twice(env: Env) -> int:
    """How often the daemons of a run wrote ids the index held twice again (their logs)."""
    return sum(
        log.read_text(errors="replace").count("ids twice") for log in env.root.glob("daemon-*.log")
    )


def _median_ms(values: list[float]) -> int:
    return round(sorted(values)[len(values) // 2] * 1000) if values else 0


def _findings(env: Env, slug: str) -> list[str]:
    """The contents of the project's session findings, read from the database (read-only)."""
    db = env.data / "projects" / slug / "memory.db"
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [row[0] for row in conn.execute("SELECT content FROM findings")]
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.timeout(_MIX_TIMEOUT_S)
def test_sigkill_stream_over_the_full_mix_loses_and_doubles_nothing(
    env: Env, mix_kills: int
) -> None:
    """SIGKILL the daemon ``mix_kills`` times while one client sends the whole mix of changes
    (remember, import, forget, pin, bank update/write/sync, compaction) and a transcript grows
    under capture, each kill at a random point. After every restart ``check`` is ok (store,
    index, audit chain, bank journal). Each change is retried with its request id until
    answered; at the end every one of them is there exactly once: entries, findings, decisions
    in decisionLog.md, the last written activeContext.md."""
    started = time.monotonic()
    rng = random.Random(SEED + 3)
    run = uuid.uuid4().hex[:8]
    transcript = _claude_transcript(env)
    killer = Killer(env, {"MEMORYD_BANKS__SYNC_INTERVAL_S": "0.05"})
    writer = MixedClient(env, rng, run, transcript)
    writer.kills = lambda: killer.kills
    checks: list[float] = []

    repaired_at_open: list[str] = []

    def check_after_restart() -> None:
        t0 = time.monotonic()
        check = _call(env, protocol.Check())
        checks.append(time.monotonic() - t0)
        assert check["ok"], f"check after kill {killer.kills}: {check}"
        # The open compares the index with the store and rebuilds one that differs.
        reason = _call(env, protocol.StatusRequest())["project"]["index"]["rebuilt_at_open"]
        if reason and "differed" in reason:
            repaired_at_open.append(f"kill {killer.kills}: {reason}")

    try:
        killer.start()
        _call(env, protocol.BankInit())
        killer.run(
            writer,
            mix_kills,
            rng,
            max_delay_s=MIX_MAX_KILL_DELAY_S,
            after_restart=check_after_restart,
        )
        assert killer.kills == mix_kills
        ops = writer.ops
        by_kind = Counter(o.kind for o in ops)
        # No error, not even for a retry after a restart of a forget its first attempt did:
        # the daemon remembers the request and answers it as it did then.
        errors = [o for o in ops if o.error is not None]
        assert errors == [], [(o.kind, o.cycles, o.kills, o.error) for o in errors][:3]
        assert len(ops) >= mix_kills
        assert len({c for o in ops for c in o.cycles}) >= max(2, mix_kills // 2)

        # The bank: every decision once, in the order sent; the last write on disk.
        assert _call(env, protocol.BankSync(wait_ms=10_000)) == {"pending": 0, "writing": False}
        bank = env.project / "memory-bank"
        on_disk = re.findall(
            rf"## Decision: (Kill \d+ {run})", (bank / "decisionLog.md").read_text()
        )
        sent = [o.key for o in ops if o.kind == "bank_update"]
        assert on_disk == sent, (
            f"decisionLog.md: {len(on_disk)} decisions for {len(sent)} sent; doubled "
            f"{[t for t, c in Counter(on_disk).items() if c > 1][:3]}, missing "
            f"{sorted(set(sent) - set(on_disk))[:3]}"
        )
        writes = [o.key for o in ops if o.kind == "bank_write"]
        if writes:
            assert (bank / "activeContext.md").read_text() == writes[-1]

        # The entries: each remember and import exactly once (an archive by compaction keeps
        # it), each forgotten one gone, each pinned one pinned.
        everything = _call(env, protocol.Export(include_archived=True, include_all=True))
        entries = {e["id"]: e for e in everything["entries"]}
        contents = Counter(e["content"] for e in entries.values())
        copies: dict[str, list[dict[str, Any]]] = {}
        for e in entries.values():
            copies.setdefault(e["content"], []).append(e)
        # Not even a retry after a restart adds an entry again, when compaction archived the
        # first copy meanwhile: the daemon remembers the request, not only the content.
        doubled = sorted(c for c, es in copies.items() if len(es) > 1)
        assert doubled == [], (
            f"entries applied twice: {doubled[:3]}; their operations: "
            f"{[(o.kind, o.cycles, o.kills) for o in ops if o.key == _written_by(doubled[0])]}, "
            f"archived: {[e['archived'] for e in copies[doubled[0]]]}"
            if doubled
            else ""
        )
        # Each remember answered as its first attempt was (each content is new: never a
        # duplicate, so never reinforced by a retry), each import with all its lines.
        assert [o.key for o in ops if o.kind == "remember" and o.result["duplicate"]] == []
        assert [
            o.key for o in ops if o.kind == "import" and o.result["imported"] != MIX_IMPORT_LINES
        ] == []
        for op in (o for o in ops if o.kind == "remember"):
            assert op.result["id"] in entries or op.result["id"] in writer.forgotten, op.key
            if op.result["id"] in entries:
                assert entries[op.result["id"]]["content"] == op.key
        assert not writer.forgotten & set(entries), "a forgotten entry came back"
        assert all(entries[i]["status"] == "pinned" for i in writer.pinned)
        per_import = Counter(c.split(" ")[2] for c in contents if c.startswith("imported fact "))
        imports = [o.key for o in ops if o.kind == "import"]
        assert per_import == dict.fromkeys(imports, MIX_IMPORT_LINES), per_import
        ours = {o.key for o in ops if o.kind == "remember"}
        strays = [c for c in contents if c.startswith("killstream fact ") and c not in ours]
        assert strays == [], f"entries nobody sent: {strays[:3]}"

        # The transcript: once the turn ends, each decision line is one finding, none twice.
        slug = _call(env, protocol.StatusRequest())["project"]["slug"]
        tokens = [o.key for o in ops if o.kind == "capture"]
        if tokens:
            turn_end = protocol.Hook(
                agent="claude",
                event="turn_end",
                session_id=MIX_SESSION,
                transcript_path=str(transcript),
            )
            _call(env, turn_end)

            def findings_per_token() -> Counter[str] | None:
                found = Counter(t for f in _findings(env, slug) for t in tokens if f" {t} " in f)
                return found if len(found) == len(tokens) else None

            found = until(findings_per_token, "a finding for every decision line appended")
            assert set(found.values()) == {1}, found.most_common(3)

        assert_check_ok(env)
        report = assert_clean_on_disk(env, killer.daemon, slug, None)
    finally:
        killer.close()
    took = time.monotonic() - started
    retried = Counter(o.kind for o in ops if o.crossed_a_restart and o.result is not None)
    print(
        f"\n{killer.kills} kills in {took:.1f}s ({took / max(1, killer.kills):.2f}s a kill; "
        f"medians: restart {_median_ms(killer.restarts_s)} ms, check after it "
        f"{_median_ms(checks)} ms): "
        f"{len(ops)} operations {dict(by_kind)}, {writer.restarts_crossed} answered only after "
        f"a restart {dict(retried)}; "
        f"audit seq {report.last_seq}; index repaired at open: {repaired_at_open or 'never'}; "
        f"ids held twice healed while running: {_healed_twice(env)}"
    )


# ---------------------------------------------------------------- retries across a restart


def _memory_db(env: Env) -> Path:
    (project,) = (env.data / "projects").iterdir()
    return project / "memory.db"


def _erase_replies(env: Env, at_least: int) -> None:
    """As if the daemon had died after each change, before its reply: the kept replies gone
    (their effects stay), with the daemon stopped."""
    with contextlib.closing(sqlite3.connect(_memory_db(env))) as conn, conn:
        assert conn.execute("UPDATE requests SET reply=NULL").rowcount >= at_least


def _ids_call(env: Env, request: protocol.Request) -> Any:
    """Send ``request`` as it is (its id fixed by the caller: a retry sends it again)."""
    request.project = str(env.project)
    with Client(endpoint=_endpoint(env), budget_s=BULK_BUDGET_S) as client:
        reply = client.call(request)
    assert isinstance(reply, protocol.Ok), reply
    return msgspec.to_builtins(protocol.result_of(request, reply))


@pytest.mark.parametrize("reply_kept", [True, False], ids=["reply-kept", "died-before-reply"])
def test_a_change_retried_after_sigkill_gets_its_first_reply_and_changes_nothing(
    env: Env, reply_kept: bool
) -> None:
    """Remember, import, forget, pin and supersede, each acknowledged, then SIGKILL and a
    restart; entries archived meanwhile (as compaction does); then each request sent again with
    its id: the same reply, and nothing applied twice: no copy of an archived entry, no second
    reinforcement, no ``not_found`` for the forget. ``died-before-reply``: the store lost the
    replies (the daemon died after the change, before it kept and sent its reply): the retry is
    answered from what the change did."""
    fresh = lambda request: msgspec.structs.replace(request, id=uuid.uuid4().hex)  # noqa: E731
    daemon = Daemon(env).start()
    try:
        kept = fresh(protocol.Remember(content="retry kept fact: the queue uses redis streams"))
        archived = fresh(protocol.Remember(content="retry archived fact: builds run on bazel"))
        lines = [json.dumps({"content": f"retry imported fact number {k}"}) for k in range(3)]
        imported = fresh(protocol.Import(lines=[*lines, "{not json"]))
        target = _ids_call(env, protocol.Remember(content="retry forgotten fact: old lint"))
        other = _ids_call(env, protocol.Remember(content="retry pinned fact: py 3.12 only"))
        forget = fresh(protocol.Forget(target=target["id"]))
        pin = fresh(protocol.Pin(target=other["id"]))
        old = _ids_call(env, protocol.Remember(content="retry superseded fact: tabs"))
        supersede = fresh(protocol.Supersede(target=old["id"], content="retry new fact: spaces"))
        sent = [kept, archived, imported, forget, pin, supersede]
        first = [_ids_call(env, r) for r in sent]
        assert first[2]["imported"] == 3 and len(first[2]["rejected"]) == 1
        before = {e["id"]: e for e in _call(env, protocol.Export(include_archived=True))["entries"]}
        daemon.kill()
        if not reply_kept:
            _erase_replies(env, len(sent))
        daemon = Daemon(env).start()
        imported_ids = [i for i, e in before.items() if e["content"].startswith("retry imported")]
        _call(env, protocol.Archive(targets=[first[1]["id"], *imported_ids]))
        after_archive = _call(env, protocol.Export(include_archived=True))["entries"]

        assert [_ids_call(env, r) for r in sent] == first
        now = {e["id"]: e for e in _call(env, protocol.Export(include_archived=True))["entries"]}
        assert now == {e["id"]: e for e in after_archive}  # nothing changed by the retries
        assert now[first[0]["id"]]["access_count"] == before[first[0]["id"]]["access_count"]
        assert target["id"] not in now and now[other["id"]]["status"] == "pinned"
        assert Counter(e["content"] for e in now.values()).most_common(1)[0][1] == 1
        assert_check_ok(env)
    finally:
        daemon.stop()


def _state(env: Env) -> dict[str, Any]:
    """What the retried requests of the next test could change, as the daemon reports it."""
    entries = _call(env, protocol.Export(include_archived=True))["entries"]
    return {
        "entries": {e["id"]: e for e in entries},
        "notes": _call(env, protocol.Notes())["notes"],
        "aliases": _call(env, protocol.AliasList())["aliases"],
        "conflicts": _call(env, protocol.Conflicts())["conflicts"],
        "review": _call(env, protocol.Review(limit=200))["items"],
    }


def test_a_retry_whose_reply_was_lost_is_answered_from_its_journaled_event(env: Env) -> None:
    """The changes whose effects name no entry (a note, notes done, a link, a focus, a release,
    a resolve, an alias added and removed, review decisions), each acknowledged; then SIGKILL,
    the kept replies lost (as if the daemon died after each change, before its reply), a
    restart, and each request sent again with its id: each gets the reply it first got, and
    nothing changes (no second note, no error for what was done already). (A list in a reply,
    such as a focus's session's entries, is rebuilt as it is now: here none changed since.)"""
    from test_capture_e2e import CONVERSATION, SESSION, _record, _transcript

    fresh = lambda request: msgspec.structs.replace(request, id=uuid.uuid4().hex)  # noqa: E731
    daemon = Daemon(env).start()
    try:
        path = _transcript(env)
        with open(path, "w", encoding="utf-8") as fh:
            for n, (role, text) in enumerate(CONVERSATION):
                fh.write(json.dumps(_record(env, role, text, n)) + "\n")
        _call(env, protocol.Hook(agent="claude", event="session_end", session_id=SESSION,
                                 transcript_path=str(path)))  # fmt: skip

        def three_waiting() -> list[dict[str, Any]] | None:
            found = _call(env, protocol.Review(limit=200))["items"]
            return found if len(found) >= 3 else None

        items = until(three_waiting, "three items waiting for review")
        always = "Always use the repository pattern for the db"
        a = _ids_call(env, protocol.Remember(content=always, category="pattern"))
        b = _ids_call(env, protocol.Remember(content=always.replace("Always", "Never"),
                                             category="pattern"))  # fmt: skip
        c = _ids_call(env, protocol.Remember(content="The queue is drained by the worker pool"))
        (conflict,) = _call(env, protocol.Conflicts())["conflicts"]
        first_note = _ids_call(env, protocol.NoteAdd(content="look at the flaky cart test"))
        _ids_call(env, protocol.Focus(session="s-gone", targets=[c["id"]]))
        sent = [
            fresh(protocol.NoteAdd(content="rotate the staging keys on friday")),
            fresh(protocol.Notes(done=[first_note["id"][:8]])),
            fresh(protocol.Connect(source=c["id"], target=a["id"], relation="depends_on")),
            fresh(protocol.Focus(session="s-retry", targets=[c["id"], a["id"]])),
            fresh(protocol.Release(session="s-gone")),
            fresh(protocol.Resolve(conflict=conflict["id"], keep=b["id"])),
            fresh(protocol.AliasAdd(term="k8s", synonyms=["kubernetes", "kube"])),
            fresh(protocol.AliasRemove(term="k8s")),
            fresh(protocol.ReviewAccept(ids=[items[0]["id"][:8]])),
            fresh(protocol.ReviewReject(ids=[items[1]["id"]], reason="not a decision")),
            fresh(protocol.ReviewEdit(target=items[2]["id"], content="Lock the cart cache")),
        ]
        first = [_ids_call(env, r) for r in sent]
        before = _state(env)
        daemon.kill()
        _erase_replies(env, len(sent))
        daemon = Daemon(env).start()

        assert [_ids_call(env, r) for r in sent] == first
        assert _state(env) == before  # nothing changed by the retries
        assert [n["content"] for n in before["notes"]] == ["rotate the staging keys on friday"]
        with contextlib.closing(sqlite3.connect(_memory_db(env))) as conn:
            # The rebuilt replies kept: a next retry reads them, not the journal.
            kept = conn.execute("SELECT id FROM requests WHERE reply IS NOT NULL").fetchall()
        assert {r.id for r in sent} <= {row[0] for row in kept}
        assert_check_ok(env)
    finally:
        daemon.stop()
