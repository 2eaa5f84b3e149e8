"""The owner thread's loop: the ROUTER socket, the ``inproc://`` mailbox and signals, served one
message at a time. Nothing a client sends can raise out of here or block it."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import zmq

from memctl import paths
from memctl import protocol as p
from memoryd import logs, messages, runtime
from memoryd.core.errors import MemorydError
from memoryd.core.redaction import redact
from memoryd.project import ProjectMemory
from memoryd.request_ids import SERVING
from memoryd.server.context import DaemonContext, Deferred, Parked, RunState, unique_id
from memoryd.server.gate import ConnectionGate
from memoryd.server.handlers import HANDLERS
from memoryd.server.handlers.internal import INTERNAL_HANDLERS
from memoryd.server.readers import Readers, ReadJob

DRAIN_BATCH = 64
MAILBOX_TURN_S = 0.05  # internal work a loop turn does before clients are served again
CLOSE_LINGER_MS = 1000
ERROR_MESSAGE_MAX = 2_000  # characters of an error reply's message
KNOWN_OPS = frozenset(str(t.__struct_config__.tag) for t in p.REQUEST_TYPES)


def _op(request: p.Request[Any]) -> str:
    return str(type(request).__struct_config__.tag)


class _ParkedRequest:
    __slots__ = ("envelope", "parked", "request", "started")

    def __init__(
        self, envelope: list[bytes], request: p.Request[Any], parked: Parked, started: float
    ):
        self.envelope, self.request, self.parked, self.started = envelope, request, parked, started


class Server:
    def __init__(
        self,
        zctx: zmq.Context[Any],
        context: DaemonContext,
        *,
        max_message_bytes: int,
        reply_cache_size: int,
        log: Any,
        idle_work: Callable[[], bool] | None = None,
        readers: int = 0,
    ) -> None:
        self.context = context
        # Reads (a handler's ``Deferred``) go to these threads; none: served here.
        self.readers = Readers(readers) if readers > 0 else None
        self._log = log
        # Queued background work done between messages, a piece per loop turn; returns whether
        # more remains (then the loop does not sleep).
        self._idle_work = idle_work
        self._reply_cache: OrderedDict[str, bytes] = OrderedDict()
        self._reply_cache_size = reply_cache_size
        self._parked: list[_ParkedRequest] = []
        # The envelope of each change (a hook) whose read a reader thread is serving, by id: a
        # retry meanwhile gets the answer, and is not run a second time.
        self._reading: dict[str, list[bytes]] = {}
        p.build_request_decoder()
        self.router = zctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
        self.router.setsockopt(zmq.SNDHWM, 10_000)
        self.mailbox = zctx.socket(zmq.PULL)
        self.mailbox.setsockopt(zmq.LINGER, 0)
        self.mailbox.bind(messages.INTERNAL_ENDPOINT)
        # Watches the connections from the start (its monitor polled with the rest): refuses
        # new ones before descriptors run out and counts the clients gone.
        self.gate = ConnectionGate(self.router)
        self._leaving_from: int | None = None  # the gate's disconnect count at a shutdown
        self._endpoint: str | None = None
        self._socket_id: tuple[int, int] | None = None  # (device, inode) of the socket file
        self._socket_lost = False
        self._sig_r, self._sig_w = socket.socketpair()
        self._sig_r.setblocking(False)
        self._sig_w.setblocking(False)

    def bind(self, endpoint: str) -> None:
        with runtime.private_umask():
            self.router.bind(endpoint)
        self._endpoint = endpoint
        self._socket_id = _socket_id(endpoint)
        ipc = paths.ipc_path(endpoint)
        self.gate.path = Path(ipc) if ipc else None

    def keep_socket(self) -> bool:
        """Bind the socket again if its file is gone (logind removes the runtime directory at
        logout; clients find the daemon by that file). Returns whether it was re-created. A
        socket another daemon now serves at that path is left alone and reported."""
        with self.gate.lock:  # a file the gate moved aside (no descriptors to spare) is kept
            if self.gate.hidden:
                return False
            return self._keep_socket()

    def _keep_socket(self) -> bool:
        if self._endpoint is None or self._socket_id is None:
            return False
        if _socket_id(self._endpoint) == self._socket_id:
            return False
        path = Path(paths.ipc_path(self._endpoint) or "")
        try:
            runtime.prepare_private_dir(path.parent)
            runtime.claim_socket(path)
        except (OSError, runtime.AlreadyRunning) as exc:
            if not self._socket_lost:  # tried again each time, reported once
                self._log.error("socket_lost", socket=str(path), error=str(exc))
                self.context.errors.record(f"socket {path} lost and not re-created: {exc}")
            self._socket_lost = True
            return False
        with contextlib.suppress(zmq.ZMQError):
            self.router.unbind(self._endpoint)
        self.bind(self._endpoint)
        self._socket_lost = False
        self._log.warning("socket_recreated", socket=str(path))
        return True

    # ------------------------------------------------------------------ loop

    def serve(self) -> None:
        """Serve until a stop is requested. Signals become internal messages (``stop`` and
        ``reload``) and travel the same path as everything else."""
        previous = {
            s: signal.signal(s, _ignore) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        }
        old_fd = signal.set_wakeup_fd(self._sig_w.fileno(), warn_on_full_buffer=False)
        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        poller.register(self.mailbox, zmq.POLLIN)
        poller.register(self._sig_r.fileno(), zmq.POLLIN)
        poller.register(self.gate.monitor, zmq.POLLIN)
        if self.readers is not None:
            poller.register(self.readers.fileno(), zmq.POLLIN)
        try:
            more_work = False
            while self.context.lifecycle.state is RunState.RUNNING:
                ready = dict(poller.poll(0 if more_work else self._poll_timeout_ms()))
                if self.gate.monitor in ready:
                    self.gate.drain()
                if self._sig_r.fileno() in ready:
                    self._drain_signals()
                if self.readers is not None and self.readers.fileno() in ready:
                    self.readers.collect()
                if self.mailbox in ready:
                    self._drain_mailbox()
                if self.router in ready:
                    self._drain_router()
                self._wake_parked()
                more_work = self._idle_step()
                if not more_work:  # before sleeping: the work just finished may answer one
                    self._wake_parked()
        finally:
            signal.set_wakeup_fd(old_fd)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _idle_step(self) -> bool:
        if self._idle_work is None:
            return False
        try:
            return self._idle_work()
        except Exception as exc:
            self._log.exception("idle_work_failed")
            self.context.errors.record(f"background work failed: {type(exc).__name__}: {exc}")
            return True  # the failed piece is gone; carry on with the rest

    def _poll_timeout_ms(self) -> int | None:
        # No parked request: sleep until something arrives (no busy polling when idle).
        if not self._parked:
            return None
        soonest = min(item.parked.deadline for item in self._parked)
        return max(0, int((soonest - time.monotonic()) * 1000) + 1)

    def _drain_signals(self) -> None:
        try:
            data = self._sig_r.recv(64)
        except BlockingIOError:
            return
        for signum in data:
            if signum == signal.SIGHUP:
                self._handle_internal(messages.ReloadRequested())
            elif signum in (signal.SIGTERM, signal.SIGINT):
                self._handle_internal(messages.StopRequested(signal.Signals(signum).name))

    def _drain_mailbox(self) -> None:
        # Clients are served between internal messages once a turn has taken its share: a job
        # that keeps being slow (a tick waiting out a locked database) while new ticks keep
        # arriving would otherwise hold the loop in this drain and starve every client.
        started = time.monotonic()
        for _ in range(DRAIN_BATCH):
            if time.monotonic() - started > MAILBOX_TURN_S:
                return
            try:
                frame = self.mailbox.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                message = messages.decode(frame)
            except msgspec.MsgspecError as exc:
                self._log.error("internal_message_invalid", error=str(exc))
                continue
            self._handle_internal(message)

    def _handle_internal(self, message: messages.Internal) -> None:
        """``INTERNAL_HANDLERS[type(message)]``, as a request goes to ``HANDLERS``. Background
        work (a transcript, a tick, a reload) that fails is reported to the next client and
        logged; it must never stop the loop."""
        try:
            INTERNAL_HANDLERS[type(message)](self.context, message)
        except Exception as exc:
            self._log.exception("internal_message_failed", message=type(message).__name__)
            self.context.errors.record(
                f"{type(message).__name__} failed: {type(exc).__name__}: {exc}"
            )

    def _drain_router(self) -> None:
        for _ in range(DRAIN_BATCH):
            try:
                frames = self.router.recv_multipart(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return
            try:
                self._serve_frames(frames)
            except Exception as exc:
                # Last line of defence: one bad message must never stop the loop, and its
                # sender still hears back instead of waiting out its budget.
                self._log.exception("request_failed")
                failure = p.Error(
                    id=None, code=p.ErrorCode.INTERNAL, message=_redacted(f"internal error: {exc}")
                )
                self._send(frames[:1], p.encode(failure))

    # ------------------------------------------------------------------ one request

    def _serve_frames(self, frames: list[bytes]) -> None:
        started = time.perf_counter()
        # [identity, payload] from DEALER; [identity, b"", payload] from REQ.
        if len(frames) >= 3 and frames[1] == b"":
            envelope, body = frames[:2], frames[2:]
        else:
            envelope, body = frames[:1], frames[1:]
        if len(body) != 1:
            self._reply(
                envelope,
                p.Error(
                    id=None,
                    code=p.ErrorCode.BAD_REQUEST,
                    message=f"expected one message frame, got {len(body)}",
                ),
                "-",
                started,
            )
            return
        request = self._decode(body[0])
        if isinstance(request, p.Error):
            self._reply(envelope, request, "-", started)
            return
        op = _op(request)
        # A retry of a request still in flight first (no store read for it), then of one
        # answered already.
        request_id = unique_id(request)
        if request_id in self._reading:
            self._reading[request_id] = envelope
            self._log.info("request", op=op, project=request.project, outcome="rejoined")
            return
        parked = self._parked_as(request)
        if parked is not None:
            # A client's retry of a request still waiting: the answer goes to the retry, and
            # the request is not run a second time (an LLM-routed bank change would be).
            parked.envelope = envelope
            self._log.info("request", op=op, project=request.project, outcome="rejoined")
            return
        cached = self._cached_reply(request)
        if cached is not None:
            self._send(envelope, cached)
            self._log.info(
                "request", op=op, project=request.project, ms=_ms(started), outcome="replayed"
            )
            return
        self._dispatch(envelope, request, started)

    def _parked_as(self, request: p.Request[Any]) -> _ParkedRequest | None:
        if not unique_id(request):
            return None
        return next((item for item in self._parked if item.request.id == request.id), None)

    def _decode(self, frame: bytes) -> p.Request[Any] | p.Error:
        try:
            request = p.decode_request(frame)
        except Exception as exc:  # DecodeError, ValidationError, RecursionError, bad UTF-8
            return self._decode_error(frame, exc)
        if request.v != p.PROTOCOL_VERSION:
            side = "older" if request.v > p.PROTOCOL_VERSION else "newer"
            return p.Error(
                id=request.id,
                code=p.ErrorCode.VERSION_MISMATCH,
                message=f"client speaks protocol {request.v}, daemon speaks {p.PROTOCOL_VERSION}: "
                f"the daemon is {side}; restart it after upgrading (`memoryd run`)",
            )
        return request

    def _decode_error(self, frame: bytes, exc: Exception) -> p.Error:
        request_id, op = p.decode_envelope(frame)
        # A field's path: the frame was a map (its envelope may be unreadable for a value nested
        # too deeply to skip).
        inside = isinstance(exc, msgspec.ValidationError) and " - at `$." in str(exc)
        if isinstance(exc, RecursionError):
            message = "malformed request: nested too deeply to read"
        elif (
            isinstance(exc, msgspec.DecodeError)
            and request_id is None
            and op is None
            and not inside
        ):
            message = "malformed message: not a MessagePack map"
        elif op is not None and op not in KNOWN_OPS:
            message = f"unknown op {op[:64]!r}"
        elif op is None and not inside:
            message = "malformed request: no valid 'op' field"
        elif isinstance(exc, msgspec.ValidationError):
            message = f"invalid request: {p.explain(exc)}"
        else:
            message = f"invalid request: {exc}"
        return p.Error(id=request_id, code=p.ErrorCode.BAD_REQUEST, message=message[:500])

    def _dispatch(self, envelope: list[bytes], request: p.Request[Any], started: float) -> None:
        reply = self._run(request, deferring=self._readers_help())
        if isinstance(reply, Parked):
            self._parked.append(_ParkedRequest(envelope, request, reply, started))
            return
        if isinstance(reply, Deferred):
            assert self.readers is not None
            request_id = unique_id(request) if type(request).mutates else ""
            if request_id:
                self._reading[request_id] = envelope

            def done(job: ReadJob) -> None:
                answer = self._finish(request, job)
                to = self._reading.pop(request_id, envelope) if request_id else envelope
                self._answer(to, request, answer, started)

            self.readers.submit(ReadJob(reply, done))
            return
        self._answer(envelope, request, reply, started)

    def _readers_help(self) -> bool:
        """Whether a read goes to a reader thread: only when reads overlap (one is running
        there already, or another request waits). A lone read is served here, as fast as
        before: handing it over costs two thread wake-ups, milliseconds on a loaded machine."""
        if self.readers is None:
            return False
        if self.readers.in_flight:
            return True
        return bool(self.router.getsockopt(zmq.EVENTS) & zmq.POLLIN)

    def _finish(self, request: p.Request[Any], job: ReadJob) -> p.Ok | p.Error:
        """The reply to a read a reader thread served, on the owner thread: ``finish`` applies
        what it left (accesses, latency); a failure is answered as a handler's is."""
        if job.failed:
            return self._failure(request, job.outcome)
        try:
            result = job.deferred.finish(job.outcome)
        except Exception as exc:
            return self._failure(request, exc)
        return p.ok(request.id, result)

    def _failure(self, request: p.Request[Any], exc: BaseException) -> p.Error:
        if isinstance(exc, MemorydError):
            return p.Error(id=request.id, code=exc.code, message=str(exc))
        self._log.error("handler_failed", op=_op(request), exc_info=exc)
        return p.Error(
            id=request.id,
            code=p.ErrorCode.INTERNAL,
            message=f"internal error: {type(exc).__name__}: {exc}",
        )

    def _answer(
        self, envelope: list[bytes], request: p.Request[Any], reply: p.Ok | p.Error, started: float
    ) -> None:
        """Send the reply; a change's is kept, so that a retry of it is answered, not re-run:
        durably, in its project's store, before it is sent, when the change did something
        there."""
        request_id = unique_id(request) if type(request).mutates else ""
        changed = SERVING.take(request_id) if request_id else None
        if changed is not None and isinstance(reply, p.Ok):
            self._keep_durably(changed, request, request_id, reply)
        encoded = self._reply(envelope, reply, request.project, started, _op(request))
        if request_id:
            self._remember_reply(request_id, encoded)

    def _project_of(self, request: p.Request[Any]) -> ProjectMemory | None:
        """The project a change with a unique id acts on, where its reply is kept; None for a
        request outside any project (its handler says why)."""
        if not type(request).needs_project:
            return None
        try:
            if not request.project_explicit:
                self.context.registry.check_project(request.project)
            return self.context.registry.get(request.project)
        except Exception:
            return None

    def _keep_durably(
        self, project: ProjectMemory, request: p.Request[Any], request_id: str, reply: p.Ok
    ) -> None:
        try:
            project.keep_reply(request_id, p.encode(reply))
        except Exception as exc:  # the change is made: its retry is answered from its effects
            self._log.warning("reply_not_kept", op=_op(request), error=str(exc))

    def _durable_reply(self, request: p.Request[Any]) -> bytes | None:
        """The reply of a change its project's store says was applied already (by this daemon
        or one before a restart), or None."""
        project = self._project_of(request)
        if project is None:
            return None
        try:
            answered = project.answered(request)
        except Exception as exc:
            self._log.warning("reply_not_read", op=_op(request), error=str(exc))
            return None
        if answered is None or isinstance(answered, bytes):
            return answered
        assert isinstance(request.id, str)
        reply = p.ok(request.id, answered)
        self._keep_durably(project, request, request.id, reply)  # a next retry reads it here
        return p.encode(reply)

    def _run(
        self, request: p.Request[Any], *, deferring: bool = False
    ) -> p.Ok | p.Error | Parked | Deferred[Any, Any]:
        """The handler's answer; a read it defers is run here unless ``deferring``."""
        try:
            if type(request).needs_project and not request.project_explicit:
                self.context.registry.check_project(request.project)
            request_id = unique_id(request) if type(request).mutates else ""
            with (
                SERVING.serving(request_id, _op(request))
                if request_id
                else contextlib.nullcontext()
            ):
                result = HANDLERS[type(request)](self.context, request)
            if isinstance(result, Deferred) and not deferring:
                result = result.run()
        except Exception as exc:
            return self._failure(request, exc)
        if isinstance(result, Parked | Deferred):
            return result
        return p.ok(request.id, result)

    def _reply(
        self,
        envelope: list[bytes],
        reply: p.Ok | p.Error,
        project: str | None,
        started: float,
        op: str = "-",
    ) -> bytes:
        # An error may quote the request that caused it (a name, a keyword, a decode error's
        # input), a background error the text it failed on: redacted here, the one place every
        # reply passes. Cut first, so redaction never runs over a huge echo.
        reply.previous_errors = [
            msgspec.structs.replace(e, description=_redacted(e.description))
            for e in self.context.errors.take()
        ]
        if isinstance(reply, p.Error):
            reply.message = _redacted(reply.message)
        if self.context.lifecycle.wait_for_client:
            self._watch_disconnects()
        encoded = p.encode(reply)
        self._send(envelope, encoded)
        outcome = "ok" if isinstance(reply, p.Ok) else reply.code.value
        ms = _ms(started)
        self.context.health.record(time.time(), op, ms)
        if logs.enabled():
            self._log.info("request", op=op, project=project, ms=ms, outcome=outcome)
        return encoded

    def _send(self, envelope: list[bytes], encoded: bytes) -> None:
        try:
            # A vanished or slow client must never block the loop: drop instead of waiting.
            self.router.send_multipart([*envelope, encoded], zmq.NOBLOCK)
        except zmq.Again:
            self._log.warning("reply_dropped", reason="client not reading")
        except zmq.ZMQError as exc:
            self._log.warning("reply_dropped", reason=str(exc))

    def _cached_reply(self, request: p.Request[Any]) -> bytes | None:
        if not type(request).mutates or not isinstance(request.id, str):
            return None
        cached = self._reply_cache.get(request.id)
        if cached is None and unique_id(request):
            cached = self._durable_reply(request)
        return cached

    def _remember_reply(self, request_id: str, encoded: bytes) -> None:
        if self._reply_cache_size == 0:
            return
        self._reply_cache[request_id] = encoded
        while len(self._reply_cache) > self._reply_cache_size:
            self._reply_cache.popitem(last=False)

    def _wake_parked(self) -> None:
        if not self._parked:
            return
        now = time.monotonic()
        waiting: list[_ParkedRequest] = []
        for item in self._parked:
            ready = item.parked.ready
            if ready is not None and not ready() and now < item.parked.deadline:
                waiting.append(item)
                continue
            reply = self._run(item.request)
            assert not isinstance(reply, Deferred)  # run here: not deferring
            if isinstance(reply, Parked) and now < item.parked.deadline:
                # Waiting on something new now: its test, never past the first deadline.
                item.parked = dataclasses.replace(
                    reply, deadline=min(item.parked.deadline, reply.deadline)
                )
                waiting.append(item)
                continue
            if isinstance(reply, Parked):
                # Past the deadline: the answer of this last run, as fresh as it gets.
                self._expire(item.request, reply)
                reply = p.ok(item.request.id, reply.on_timeout)
            self._answer(item.envelope, item.request, reply, item.started)
        self._parked = waiting

    def _expire(self, request: p.Request[Any], parked: Parked) -> None:
        """``parked.expired``: a failure there is reported, and the request still answered."""
        if parked.expired is None:
            return
        try:
            parked.expired()
        except Exception as exc:
            self._log.exception("parked_expiry_failed", op=_op(request))
            self.context.errors.record(f"{_op(request)}: {type(exc).__name__}: {exc}")

    def _watch_disconnects(self) -> None:
        """Start watching for clients leaving, before the reply to a ``shutdown`` is sent.

        A client with IMMEDIATE=1 drops a reply still unread in its pipe when the daemon's end
        closes first, so ``close`` waits (briefly, on this event) for that client to go."""
        if self._leaving_from is None:
            self._leaving_from = self.gate.disconnects

    def close(self) -> None:
        # Whoever waits on a parked request (an LLM that never answered) hears that nothing was
        # done, and has the same brief time as a ``shutdown``'s client to read it before the
        # socket closes under it.
        if self.readers is not None:
            # Reads taken on are answered (briefly waited for), as a parked request is below.
            self.readers.drain(time.monotonic() + CLOSE_LINGER_MS / 1000)
            self.readers.close()
        leaving = (1 if self._leaving_from is not None else 0) + len(self._parked)
        if self._parked:
            self._watch_disconnects()
        for item in self._parked:
            # No ``expired`` here: what it would hand over was done at the stop already (the
            # sessions a hook waited to close were closed on all of their transcript).
            self._reply(
                item.envelope,
                p.ok(item.request.id, item.parked.on_timeout),
                item.request.project,
                item.started,
            )
        self._parked = []
        if self._leaving_from is not None:
            deadline = time.monotonic() + CLOSE_LINGER_MS / 1000
            self.gate.wait_disconnects(self._leaving_from, leaving, deadline)
        self.gate.stop()
        # Let replies already queued (the answer to a `shutdown` request among them) leave.
        self.router.close(linger=CLOSE_LINGER_MS)
        self.mailbox.close(linger=0)
        self._sig_r.close()
        self._sig_w.close()


def _socket_id(endpoint: str) -> tuple[int, int] | None:
    path = paths.ipc_path(endpoint)
    if path is None:
        return None
    try:
        info = os.stat(path)
    except OSError:
        return (0, 0)  # gone: never equal to the id of a bound socket
    return (info.st_dev, info.st_ino)


def _ignore(signum: int, frame: object) -> None:
    """The wakeup fd carries the signal to the loop; the handler itself has nothing to do."""


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _redacted(message: str) -> str:
    return redact(message[:ERROR_MESSAGE_MAX]).text
