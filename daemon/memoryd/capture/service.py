"""Capture (design §6, §7): transcripts → messages → findings → session memory → promotion.

Runs on the owner thread only; the watcher merely tells it which file changed. Each transcript
file is one session. New complete lines are parsed into messages; findings are extracted by
rule, redacted, and journaled as checkpoints of session memory (searchable at once); a turn's end
(the Stop hook) is one more checkpoint. The session is finalized once, when it ends: the
SessionEnd hook, the agent's next session in the project, idle for ``idle_minutes``, or the
daemon's shutdown; then come an ``auto`` episode, promotion of the findings that earn it, every
decision in the audit log.

Cursors (inode, offset) are kept in one small file in the state directory. After a crash a file
is simply read again from the start: findings have deterministic ids and promotion dedups by
fingerprint, so re-reading adds nothing twice.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from memctl import protocol as p
from memoryd.atomic import write_atomic
from memoryd.background import BackgroundErrors
from memoryd.capture import parsers
from memoryd.capture.parsers.base import ParserState
from memoryd.capture.tail import Cursor, read_document, read_new
from memoryd.core import redaction
from memoryd.core.capture.extraction import Extractor
from memoryd.core.capture.finalization import SessionClose, plan_finalization
from memoryd.core.capture.findings import SessionFinding, finding_id, session_memory_keeps
from memoryd.core.capture.paths import ProjectPaths
from memoryd.core.capture.promotion import Preset
from memoryd.core.capture.rules import ExtractionRule
from memoryd.core.capture.transcript import Agent, Message
from memoryd.core.errors import BadRequest, Forbidden, MemorydError
from memoryd.core.events import FindingsDropped, FindingsRecorded, SessionInfo
from memoryd.project import ProjectMemory
from memoryd.registry import ProjectRegistry

# One step of reading a transcript on the owner thread: at most this many bytes of lines are
# read, parsed and extracted before the loop serves its clients again; the rest of a large
# transcript is read a slice per loop turn (``work_backlog``). A line longer than a slice is
# still read whole, up to ``tail.DEFAULT_MAX_BYTES``.
SLICE_BYTES = 256 * 1024
# ... and a slice ends early, at a line's start, once it has taken this long (prose-dense lines
# cost more per byte; a loaded machine makes every step longer): the owner's budget per step.
STEP_BUDGET_S = 0.025


class FileCursor(msgspec.Struct, kw_only=True):
    """Where reading a transcript got to, and what the parser had learnt from the lines before
    it, so a restart continues from here instead of reading the file again."""

    inode: int
    offset: int
    finalized: bool = False
    session_id: str | None = None
    parent_session_id: str | None = None
    subagent_id: str | None = None
    cwd: str | None = None


# Agents whose parser needs nothing but the session's identity to continue mid-file. (A Gemini
# file can rewind to any earlier message, so it is read again from its start.)
RESUMABLE = frozenset({"claude", "codex"})


@dataclass
class Replay:
    """What a resumed session's transcript held before the cursor it resumed from (those
    messages are not in memory), read again for its episode: a slice per idle loop turn once
    every other reading is done (``work_backlog``), what is left of it when the session closes.
    Its messages and the session's own make the episode: before, the close read the whole
    file in one pass on the owner thread, ~0.2 s per 30 MB of a Claude transcript and ~0.4 s
    of a Codex one."""

    state: ParserState
    end: int  # the offset the session resumed from
    cursor: Cursor | None = None
    messages: list[Message] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.cursor is not None and self.cursor.offset >= self.end


@dataclass
class LiveSession:
    path: str
    agent: Agent
    state: ParserState
    created_at: float
    last_activity: float
    cursor: Cursor | None = None
    messages: list[Message] = field(default_factory=list)
    pending: int = 0
    project_root: str | None = None
    recorded: dict[str, tuple[str, float, bool, bool]] = field(default_factory=dict)
    finalized: bool = False
    inherited: list[SessionFinding] | None = None  # a fork's copy of its parent's findings
    closed_before: bool = False  # finalized at least once in this run
    resumed: bool = False  # continued from a saved cursor: earlier messages were not read
    replay: Replay | None = None  # then, those read again for the episode
    # Extraction over the session so far: each message is fed to it once (``fed`` of them).
    extractor: Extractor | None = None
    fed: int = 0
    first_cwd: str | None = None  # the first folder a message names (the parser may know none)

    def restart(self, state: ParserState) -> None:
        """The file is a new transcript from its first line (truncated, replaced, rewritten)."""
        self.state = state
        self.messages.clear()
        self.extractor, self.fed, self.first_cwd = None, 0, None
        self.replay = None  # what came before the resume is not this transcript's

    @property
    def session_id(self) -> str:
        sid = self.state.session_id or Path(self.path).stem
        return f"{sid}/{self.state.subagent_id}" if self.state.subagent_id else sid

    @property
    def parent_session_id(self) -> str | None:
        """The session a sub-agent runs under, or the one a fork (Codex ``forked_from_id``, a
        Claude session started from another) was copied from."""
        parent = self.state.parent_session_id
        return parent if parent and parent != self.session_id else None


def _redact(text: str) -> str:
    return redaction.redact(text).text


class CaptureService:
    def __init__(
        self,
        registry: ProjectRegistry,
        errors: BackgroundErrors,
        *,
        cursor_file: Path,
        rules: tuple[ExtractionRule, ...],
        checkpoint_every: int = 10,
        idle_minutes: float = 30.0,
        hook_wait_s: float = 1.0,
        default_preset: Preset = "balanced",
        clock: Callable[[], float] = time.time,
        log: Any = None,
        home: str | None = None,
        roots: Sequence[tuple[str, Agent]] = (),
    ) -> None:
        self._home = home if home is not None else str(Path.home())
        # Each agent's transcript folders (``[capture] roots``): a hook's transcript must be in
        # one of its agent's.
        self._roots: dict[Agent, list[str]] = {}
        for folder, agent in roots:
            self._roots.setdefault(agent, []).append(os.path.abspath(folder))
        self.registry = registry
        self._errors = errors
        self._cursor_file = cursor_file
        self._rules = rules
        self.checkpoint_every = checkpoint_every
        self.idle_s = idle_minutes * 60
        # How long a turn's or a session's end hook waits for its transcript to be read.
        self.hook_wait_s = hook_wait_s
        self.default_preset = default_preset
        self._clock = clock
        self._log = log
        self._live: dict[str, LiveSession] = {}
        # Queued paths, each with the bytes it had unread when queued; and the backlog's
        # progress since it was last empty: files and those bytes, done and in all.
        self._backlog: deque[tuple[str, int]] = deque()
        self._backlog_files = p.Progress(done=0, total=0)
        self._backlog_bytes = p.Progress(done=0, total=0)
        # Transcripts read a slice at a time, with more of them to read (path → agent).
        self._continuing: dict[str, Agent] = {}
        # Of those, the ones an end hook waits for: read before the others (``hurry``).
        self._hurried: set[str] = set()
        # Resumed sessions whose transcript is read again for their episode (``Replay``), once
        # every other reading is done (an ordered set).
        self._replaying: dict[str, None] = {}
        # Sessions whose closing the reading of their transcript took over (path → reason):
        # their end's hook stopped waiting, or another session began meanwhile. Closed once
        # read, never on part of it; but not while their end's hook waits to close them.
        self._close_when_read: dict[str, str] = {}
        self._hook_closes: set[str] = set()
        self._cursors = self._load_cursors()
        self._cursors_dirty = False
        self.stats: dict[str, Any] = {
            "files": 0,
            "messages": 0,
            "unresolved_files": 0,
            "malformed": 0,
            "unknown_records": {},
        }

    # ------------------------------------------------------------------ cursors

    def _load_cursors(self) -> dict[str, FileCursor]:
        try:
            return msgspec.json.decode(self._cursor_file.read_bytes(), type=dict[str, FileCursor])
        except FileNotFoundError:
            return {}
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            # Losing cursors only costs a re-read: nothing is duplicated by reading again.
            self._errors.record(
                f"capture cursors unreadable ({exc}); transcripts will be re-read", "warning"
            )
            return {}

    def save_cursors(self) -> None:
        if self._cursors_dirty:
            self._cursor_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomic(self._cursor_file, msgspec.json.encode(self._cursors))
            self._cursors_dirty = False

    # ------------------------------------------------------------------ reading

    def queue(self, paths: list[str]) -> None:
        """Files to read when the loop has nothing else to do (the start-up catch-up)."""
        if not self._backlog:
            self._backlog_files = p.Progress(done=0, total=0)
            self._backlog_bytes = p.Progress(done=0, total=0)
        for path in paths:
            unread = self._unread_bytes(path)
            self._backlog.append((path, unread))
            self._backlog_files.total += 1
            self._backlog_bytes.total += unread

    def _unread_bytes(self, path: str) -> int:
        """What reading ``path`` has left: past its cursor when the cursor is still its."""
        try:
            info = os.stat(path)
        except OSError:
            return 0
        known = self._cursors.get(path)
        if known is not None and known.inode == info.st_ino and known.offset <= info.st_size:
            return info.st_size - known.offset
        return info.st_size

    def work_backlog(self) -> bool:
        """Read a slice of a transcript with more to read (one an end hook waits for first),
        else start on one queued file; returns whether more is waiting."""
        if self._continuing:
            self._hurried &= self._continuing.keys()
            path = next(iter(self._hurried or self._continuing))
            self.file_changed(path, self._continuing[path])
        elif self._backlog:
            path, unread = self._backlog.popleft()
            try:
                self.file_changed(path)
            finally:
                self._backlog_files.done += 1
                self._backlog_bytes.done += unread
        elif self._replaying:
            self._replay_slice(next(iter(self._replaying)))
        return bool(self._backlog or self._continuing or self._replaying)

    def _replay_slice(self, path: str) -> None:
        del self._replaying[path]  # back at the end of the queue while there is more
        live = self._live.get(path)
        if live is None or live.replay is None or live.replay.done:
            return
        project = self._project(live)
        if project is None or not self._enabled(project):
            return  # no close will use it (were it turned on, the close reads what is left)
        with contextlib.suppress(OSError):  # gone: the close keeps what was read
            if self._replayed(live, SLICE_BYTES):
                self._replaying[path] = None

    def backlog_pending(self) -> bool:
        return bool(self._backlog or self._continuing)

    def reading(self, path: str | None) -> bool:
        """Whether what is new in ``path`` is still being read, a slice per loop turn."""
        return path is not None and path in self._continuing

    def hurry(self, path: str | None) -> None:
        """Read what is new in ``path`` before the other transcripts being read (a start-up's
        catch-up, another session): an end hook waits for it, and would share the turns."""
        if path is not None and self.reading(path):
            self._hurried.add(path)

    def close_once_read(self, path: str | None) -> None:
        """Close the session of ``path`` once what is new in it is read: its end's hook has
        stopped waiting for that (``finalize_session``)."""
        if path is None:
            return
        self._hook_closes.discard(path)
        if self.reading(path):
            self._close_when_read[path] = "session_end"  # the agent's own word on it comes first
        elif path in self._live:
            self.finalize(path, "session_end")

    def _close_if_read(self, path: str) -> None:
        """Close the session of ``path`` if the reading took its closing over and it is read
        (whatever read the last slice: the loop's idle work, the watcher, a hook)."""
        due = path in self._close_when_read and path not in self._hook_closes
        if due and not self.reading(path):
            self.finalize(path, self._close_when_read.pop(path))

    def file_changed(self, path: str, agent: Agent | None = None) -> LiveSession | None:
        """Read a slice of what is new in ``path``; checkpoint findings when there are new
        messages. What the slice leaves is read by ``work_backlog``, a slice per loop turn."""
        agent = agent or parsers.detect_agent(path)
        self._continuing.pop(path, None)
        if agent is None:
            return None
        try:
            info = os.stat(path)
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None  # a FIFO or device would block the owner thread
        known = self._cursors.get(path)
        live = self._live.get(path)
        if live is None:
            if (
                known is not None
                and known.finalized
                and (known.inode, known.offset) == (info.st_ino, info.st_size)
            ):
                return None  # finished and nothing new: do not even parse it
            live = self._open(path, agent)
        before = len(live.messages)
        if self._read(live):
            self._continuing[path] = agent
        else:
            self._hurried.discard(path)
        if len(live.messages) > before:
            live.finalized = False
            live.last_activity = self._clock()
            self._checkpoint(live)
        self._remember_cursor(live)
        self._close_if_read(path)
        return live

    def _open(self, path: str, agent: Agent) -> LiveSession:
        now = self._clock()
        live = LiveSession(
            path, agent, parsers.new_state(agent, path), created_at=now, last_activity=now
        )
        self._resume(live)
        self._live[path] = live
        self.stats["files"] += 1
        return live

    def _resume(self, live: LiveSession) -> None:
        known = self._cursors.get(live.path)
        if known is None or known.session_id is None or live.agent not in RESUMABLE:
            return
        if live.path.endswith(".json"):
            return
        try:
            info = os.stat(live.path)
        except OSError:
            return
        if info.st_ino != known.inode or info.st_size < known.offset:
            return  # replaced or truncated: a new transcript, read from its start
        state = live.state
        state.session_id, state.parent_session_id = known.session_id, known.parent_session_id
        state.subagent_id, state.cwd = known.subagent_id, known.cwd
        live.cursor = Cursor(path=live.path, inode=known.inode, offset=known.offset)
        live.resumed = True
        live.closed_before = known.finalized
        live.replay = Replay(parsers.new_state(live.agent, live.path), end=known.offset)
        self._replaying[live.path] = None

    def _replayed(self, live: LiveSession, slice_bytes: int | None = None) -> bool:
        """Read a slice of ``live``'s replay (all that is left without ``slice_bytes``);
        returns whether more of it is waiting. (A file truncated or replaced meanwhile is a
        new transcript: ``_read`` restarts the session, which drops its replay.)"""
        replay = live.replay
        assert replay is not None
        chunk = read_new(live.path, replay.cursor, slice_bytes=slice_bytes)
        if chunk.restarted:
            return False
        for offset, line in chunk.lines:
            if offset >= replay.end:  # the session read it (from its cursor)
                replay.cursor = Cursor(path=live.path, inode=chunk.cursor.inode, offset=offset)
                return False
            parsed = parsers.parse_line(live.agent, line, offset, replay.state)
            replay.messages.extend(m for m in parsed if not m.injected)
        replay.cursor = chunk.cursor
        return chunk.more and not replay.done

    def _episode_messages(self, live: LiveSession) -> list[Message]:
        """Every message of the session, for its episode: a resumed one's, those before its
        cursor (read now if the idle turns have not) and its own. A file gone meanwhile: what
        was read."""
        replay = live.replay
        if replay is None:
            return live.messages
        with contextlib.suppress(OSError):
            while self._replayed(live):
                pass
        return replay.messages + live.messages

    def _read(self, live: LiveSession) -> bool:
        """Read a slice of what is new; returns whether more is waiting to be read."""
        if live.path.endswith(".json"):
            data, live.cursor = read_document(live.path, live.cursor)
            if data is not None:
                live.restart(parsers.new_state(live.agent, live.path))
                self._accept(live, parsers.parse_document(data, live.state))  # type: ignore[arg-type]
            return False
        started = time.perf_counter()
        chunk = read_new(live.path, live.cursor, slice_bytes=SLICE_BYTES)
        if chunk.restarted and live.cursor is not None:
            # Truncated or replaced: the file is a new transcript from its first line (the
            # closing of the one before is no longer due).
            live.restart(parsers.new_state(live.agent, live.path))
            self._close_when_read.pop(live.path, None)
        live.cursor = chunk.cursor
        for i, (offset, line) in enumerate(chunk.lines):
            if i and time.perf_counter() - started > STEP_BUDGET_S:
                # Out of time: the next step goes on from this line.
                live.cursor = Cursor(path=live.path, inode=chunk.cursor.inode, offset=offset)
                return True
            self._accept(live, parsers.parse_line(live.agent, line, offset, live.state))
        return chunk.more

    def _accept(self, live: LiveSession, messages: list[Message]) -> None:
        for message in messages:
            if message.injected:
                continue
            live.messages.append(message)
            if live.first_cwd is None and message.cwd:
                live.first_cwd = message.cwd
            live.pending += 1
            self.stats["messages"] += 1
            if live.pending >= self.checkpoint_every:
                self._checkpoint(live)

    def _remember_cursor(self, live: LiveSession) -> None:
        if live.cursor is not None:
            state = live.state
            self._cursors[live.path] = FileCursor(
                inode=live.cursor.inode,
                offset=live.cursor.offset,
                finalized=live.finalized,
                session_id=state.session_id,
                parent_session_id=state.parent_session_id,
                subagent_id=state.subagent_id,
                cwd=state.cwd or live.first_cwd,
            )
            self._cursors_dirty = True

    # ------------------------------------------------------------------ session memory

    def _project(self, live: LiveSession) -> ProjectMemory | None:
        """The session's project, looked up by root each time: the registry may have closed
        it meanwhile (it keeps only the most recently used projects open)."""
        if live.project_root is None:
            cwd = live.state.cwd or live.first_cwd
            if cwd is None:
                return None
            try:
                # As for commands: a session in a folder outside any project (a scratch
                # folder, the home folder) creates no memory there.
                project = self.registry.get(cwd, named=False)
            except MemorydError:
                self.stats["unresolved_files"] += 1
                return None
            live.project_root = str(project.root)
            live.recorded = {f.id: _key(f) for f in project.session_findings(live.session_id)}
            return project
        return self.registry.get(live.project_root)

    def _enabled(self, project: ProjectMemory) -> bool:
        return project.auto_memory_enabled()

    def _checkpoint(self, live: LiveSession, full: bool = False) -> list[SessionFinding]:
        """Record what the session so far has found and session memory did not hold yet
        (``full``: the session's end, when errors still open are kept too). Each message is
        extracted once: only those new since the last checkpoint are fed to the extractor."""
        live.pending = 0
        project = self._project(live)
        if project is None or not self._enabled(project):
            return []
        if live.extractor is None:
            live.extractor = Extractor(self._rules, redact=_redact, paths=self._paths(live))
        live.extractor.feed(live.messages[live.fed :])
        live.fed = len(live.messages)
        found = live.extractor.findings()
        findings = [*self._inherited(live, project), *found]
        findings = list({f.id: f for f in findings}.values())  # its own finding wins a tie
        changed = tuple(
            f
            for f in findings
            if live.recorded.get(f.id) != _key(f) and session_memory_keeps(f, final=full)
        )
        if changed:
            project.commit(FindingsRecorded(self._session_info(live), changed))
            live.recorded.update((f.id, _key(f)) for f in changed)
        if full:
            self._drop_stale(live, project, findings)
        return findings

    def _drop_stale(
        self, live: LiveSession, project: ProjectMemory, findings: list[SessionFinding]
    ) -> None:
        """The final pass replaces what the checkpoints found: a window saw only part of the
        arc (an error before its fix, a guess before the diagnosis that replaced it)."""
        kept = {f.id for f in findings if session_memory_keeps(f, final=True)}
        stale = tuple(sorted(set(live.recorded) - kept))
        if stale:
            project.commit(FindingsDropped(session_id=live.session_id, ids=stale))
            for finding_id in stale:
                del live.recorded[finding_id]

    def _paths(self, live: LiveSession) -> ProjectPaths:
        """How this session's texts name paths: relative to its project, never the home."""
        return ProjectPaths(live.project_root, self._home)

    def _inherited(self, live: LiveSession, project: ProjectMemory) -> list[SessionFinding]:
        """Copy-on-fork (design §6): a session forked from another starts with a copy of the
        parent's findings, as its own; both can then promote, and fingerprints dedup."""
        if live.inherited is None:
            parent = live.parent_session_id
            is_fork = parent and not live.state.subagent_id
            live.inherited = [
                msgspec.structs.replace(
                    f, id=finding_id(live.session_id, f.fingerprint), session_id=live.session_id
                )
                for f in (project.session_findings(parent) if is_fork and parent else [])
            ]
        return live.inherited

    def _session_info(self, live: LiveSession) -> SessionInfo:
        cursor = live.cursor
        return SessionInfo(
            id=live.session_id,
            agent=live.agent,
            transcript_path=live.path,
            transcript_inode=cursor.inode if cursor else 0,
            transcript_offset=cursor.offset if cursor else 0,
            parent_session_id=live.parent_session_id,
            created_at=live.created_at,
        )

    # ------------------------------------------------------------------ finalizing

    def finalize(self, path: str, reason: str) -> bool:
        """Close the session of ``path``: episode, promotion, audit. False when there was no
        session to close (unknown file, no project, auto-memory off, already closed)."""
        self._close_when_read.pop(path, None)  # closed now: nothing left for the reading
        live = self._live.get(path)
        if live is None or live.finalized or not (live.messages or live.resumed):
            return False
        project = self._project(live)
        if project is None or not self._enabled(project):
            return False
        # The first close reads the whole session (an error and its fix may be far apart); a
        # later one (a session resumed after it was closed) checkpoints what is new and decides
        # on the findings already recorded, never a second pass over the whole transcript.
        incremental = live.closed_before or live.resumed
        findings = self._checkpoint(live, full=not incremental)
        if incremental:
            findings = project.session_findings(live.session_id)
        spread = project.finding_spread([f.fingerprint for f in findings])
        close = SessionClose(
            session_id=live.session_id,
            agent=live.agent,
            reason=reason,
            transcript_path=path,
            messages=self._episode_messages(live),
            findings=findings,
            preset=project.preset() or self.default_preset,
            sessions_by_fingerprint=spread[0],
            agents_by_fingerprint=spread[1],
            pinned_fingerprints=project.pinned_fingerprints(),
            not_promotable={f.id for f in findings if not project.promotable(f)},
        )
        paths = self._paths(live)
        finalized = plan_finalization(
            close,
            now=self._clock(),
            new_id=lambda: uuid.uuid4().hex,
            redact=lambda t: paths(_redact(t)),
        )
        project.commit(finalized)
        live.finalized = live.closed_before = True
        self._remember_cursor(live)
        # The session stays in memory until it goes idle, so a next turn continues from its
        # cursor instead of reading the file again.
        if self._log is not None:
            self._log.info(
                "session_finalized",
                project=project.slug,
                session=live.session_id,
                reason=reason,
                findings=len(findings),
                promoted=len(finalized.promoted),
            )
        return True

    def finalize_idle(self) -> int:
        """Finalize sessions with no new line for ``idle_minutes``, and let go of the ones that
        cannot be finalized (no project, auto-memory off): only their cursor is kept."""
        now = self._clock()
        idle = [p for p, live in self._live.items() if now - live.last_activity >= self.idle_s]
        done = sum(self.finalize(path, self._close_when_read.get(path, "idle")) for path in idle)
        for path in idle:
            if path in self._live:
                self._remember_cursor(self._live[path])
                self._retire(self._live.pop(path))
        return done

    def finalize_session(
        self, project: ProjectMemory, transcript_path: str | None, agent: Agent
    ) -> bool | None:
        """The agent says its session ended: read what is new in its transcript, then close it.
        None while there is more to read (``reading``): the hook waits, and a run of it again
        closes the session once read; a hook that stops waiting hands the closing over to the
        reading (``close_once_read``)."""
        if transcript_path:  # this hook closes it, even if reading the last slice now would
            self._hook_closes.add(transcript_path)
        try:
            live = self._hooked(project, transcript_path, agent)
        except Exception:
            # The run failed (a full disk): the hook is answered the error and never runs
            # again, so the reading (the next one: an append, idle, a stop) takes the close over.
            if transcript_path:
                self._hook_closes.discard(transcript_path)
                if transcript_path in self._live:
                    self._close_when_read[transcript_path] = "session_end"
            raise
        if live is not None and self.reading(live.path):
            return None
        self._hook_closes.discard(transcript_path or "")
        return live is not None and self.finalize(live.path, "session_end")

    def turn_ended(self, project: ProjectMemory, transcript_path: str | None, agent: Agent) -> bool:
        """A turn ended (Claude's and Codex's ``Stop``): a checkpoint of what is new in the
        transcript. The session goes on: it is finalized at its end, at the agent's next
        session, when idle, or at shutdown."""
        return self._hooked(project, transcript_path, agent) is not None

    def admit(self, project: ProjectMemory, transcript_path: str, agent: Agent) -> str:
        """The path a hook's transcript is known by (as the watcher reports it), once it is
        shown to be ``agent``'s and ``project``'s; raises (Forbidden, BadRequest) otherwise,
        before anything is read from it or written anywhere. It must resolve, symlinks
        followed, inside one of the agent's transcript folders; and the session it records must
        have run in ``project`` (from what is known of it, else from its first lines): a hook
        cannot make the daemon read an arbitrary file, or write into another project's memory."""
        if "\x00" in transcript_path or not os.path.isabs(transcript_path):
            raise BadRequest(f"transcript_path must be an absolute path, got {transcript_path!r}")
        real = os.path.realpath(transcript_path)
        path = None
        for root in self._roots.get(agent, []):
            real_root = os.path.realpath(root)
            if real.startswith(real_root + os.sep):
                path = os.path.join(root, os.path.relpath(real, real_root))
                break
        if path is None or parsers.detect_agent(path) != agent:
            folders = ", ".join(self._roots.get(agent, [])) or "none configured"
            raise Forbidden(
                f"transcript {transcript_path} is not a {agent} transcript inside {agent}'s "
                f"transcript folders ({folders}; [capture] roots): nothing was read or written"
            )
        owner = self._owner(path, agent)
        if owner is not None and owner != str(project.root):
            raise Forbidden(
                f"transcript {transcript_path} records a session of {owner or 'no project'}, "
                f"not of {project.root}: nothing was read or written"
            )
        return path

    def _owner(self, path: str, agent: Agent) -> str | None:
        """The root of the project the session at ``path`` ran in ("" for a folder outside any
        project), or None while the transcript does not say (a file not written yet)."""
        live = self._live.get(path)
        if live is not None and live.project_root is not None:
            return live.project_root
        known = self._cursors.get(path)
        cwd = known.cwd if known is not None and known.cwd else _first_cwd(path, agent)
        if cwd is None:
            return None
        try:
            return str(self.registry.root_for(cwd, named=False))
        except MemorydError:
            return ""

    def _hooked(
        self, project: ProjectMemory, transcript_path: str | None, agent: Agent
    ) -> LiveSession | None:
        """The session a hook names, read a slice further (the hook handler has ``admit``-ted
        its path). The rest of a large append is read a slice per loop turn, the hook waiting
        for it (``reading``): read in one step, it held the owner thread, and every other
        client's prompt, for as long as it took (~1 s for 30 MB)."""
        if not transcript_path or parsers.detect_agent(transcript_path) != agent:
            return None
        live = self.file_changed(transcript_path, agent)
        if live is None:
            return None
        if self._project(live) is None:
            live.project_root = str(project.root)  # the hook names it when the transcript does not
        elif live.project_root != str(project.root):
            return None
        return live

    def session_started(
        self, project: ProjectMemory, transcript_path: str | None, agent: Agent
    ) -> int:
        """A new session of ``agent`` began in ``project``: its sessions before it are over
        (Codex never says so). One still going on in another terminal is finalized again at its
        own end: the episode is refreshed, and promotion never takes a text twice."""
        root = str(project.root)
        ended = [
            path
            for path, live in self._live.items()
            if live.agent == agent
            and live.project_root == root
            and path != transcript_path
            and not live.finalized
            and path not in self._hook_closes  # its end's hook, waiting, closes it
        ]
        done = 0
        for path in ended:
            if self.reading(path):
                self._close_when_read.setdefault(path, "new_session")  # on all of it, once read
            else:
                done += self.finalize(path, "new_session")
        return done

    def finalize_all(self, reason: str) -> int:
        """At shutdown: every session still open is finalized (a failure is reported, and the
        others are still closed)."""
        done = 0
        for path, live in list(self._live.items()):
            if live.finalized:
                continue
            try:
                done += self._read_to_end(live)  # closed on all of it (or by that reading)
                if live.finalized:
                    continue
                due = self._close_when_read.pop(path, reason)
                # A hook waiting on the session's end: the agent's own word on it comes first.
                done += self.finalize(path, "session_end" if path in self._hook_closes else due)
            except (MemorydError, OSError) as exc:
                self._errors.record(f"session {live.session_id} not finalized: {exc}", "warning")
        return done

    def _read_to_end(self, live: LiveSession) -> int:
        """Read the rest of a transcript still being read, up to its size now (an agent still
        writing to it must not keep a stop waiting); returns the sessions that closed."""
        if not self.reading(live.path):
            return 0
        try:
            end = os.stat(live.path).st_size
        except OSError:
            return 0
        closed, at = 0, -1
        while self.reading(live.path) and (live.cursor is None or at < live.cursor.offset < end):
            was, at = live.finalized, live.cursor.offset if live.cursor is not None else 0
            self.file_changed(live.path, live.agent)
            closed += live.finalized and not was
        return closed

    def live_sessions(self, project: ProjectMemory) -> list[str]:
        root = str(project.root)
        # A finalized session stays in memory until idle (to resume its cursor), but it is over:
        # its findings were promoted or not, and must not fill the next session's bridge tier.
        return [
            live.session_id
            for live in self._live.values()
            if live.project_root == root and not live.finalized
        ]

    def _retire(self, live: LiveSession) -> None:
        """Keep the parse counts of a session that leaves memory."""
        self._replaying.pop(live.path, None)
        self._hurried.discard(live.path)
        self._close_when_read.pop(live.path, None)
        self._hook_closes.discard(live.path)
        self.stats["malformed"] += live.state.stats.malformed
        _add_counts(self.stats["unknown_records"], live.state.stats.unknown_records)

    def status(self) -> p.CaptureInfo:
        unknown = dict(self.stats["unknown_records"])
        malformed = self.stats["malformed"]
        for live in self._live.values():
            malformed += live.state.stats.malformed
            _add_counts(unknown, live.state.stats.unknown_records)
        return p.CaptureInfo(
            enabled=True,
            files=self.stats["files"],
            messages=self.stats["messages"],
            unresolved_files=self.stats["unresolved_files"],
            malformed=malformed,
            unknown_records=unknown,
            live_sessions=len(self._live),
            backlog=p.Backlog(
                files=msgspec.structs.replace(self._backlog_files),
                bytes=msgspec.structs.replace(self._backlog_bytes),
            )
            if self._backlog_files.total
            else None,
        )


PEEK_BYTES = 1024 * 1024  # how far into a transcript its session's folder is looked for


def _first_cwd(path: str, agent: Agent) -> str | None:
    """The folder the session at ``path`` ran in, from its first lines (read only, a regular
    file only: a FIFO would block the owner thread); None when they do not say."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        state = parsers.new_state(agent, path)
        if path.endswith(".json"):
            data, _cursor = read_document(path, None)
            found = parsers.parse_document(data, state) if data else []  # type: ignore[arg-type]
        else:
            found = []
            for offset, line in read_new(path, None, max_bytes=PEEK_BYTES).lines:
                found += parsers.parse_line(agent, line, offset, state)
                if state.cwd:
                    break
    except OSError:
        return None
    return state.cwd or next((m.cwd for m in found if m.cwd), None)


def _add_counts(total: dict[str, int], more: dict[str, int]) -> None:
    for kind, n in more.items():
        total[kind] = total.get(kind, 0) + n


def _key(f: SessionFinding) -> tuple[str, float, bool, bool]:
    return (f.content, f.importance, f.resolved_error, f.accepted)
