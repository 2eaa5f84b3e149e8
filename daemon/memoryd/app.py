"""The composition root: settings → logging → runtime dir and lock → registry → server → jobs,
torn down in reverse. The only place where the parts meet."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import zmq

from memctl import __version__, paths
from memctl import protocol as p
from memoryd import config, logs, messages, runtime
from memoryd.background import BackgroundErrors
from memoryd.banks.cache import BankCache
from memoryd.banks.journal import BankJournal
from memoryd.banks.service import BankService, build_llm
from memoryd.banks.writer import BankWriter
from memoryd.capture.service import CaptureService
from memoryd.capture.watcher import TranscriptWatcher, WatchRoot
from memoryd.core.capture.rules import DEFAULT_RULES, load_user_rules
from memoryd.core.recall.slo import SloMonitor
from memoryd.instructions.loader import InstructionConfig
from memoryd.jobs import Jobs
from memoryd.recall import Recall
from memoryd.registry import ProjectRegistry
from memoryd.server.context import DaemonContext
from memoryd.server.loop import Server

FINAL_SYNC_S = 10.0  # the most a stop waits for bank files to be written


class Daemon:
    def __init__(self, settings: config.Settings, config_file: Path | None) -> None:
        self.settings = settings
        self.config_file = config_file
        self.log: Any = logs.get()
        self.server: Server | None = None
        self.jobs: Jobs | None = None
        self.registry: ProjectRegistry | None = None
        self.capture: CaptureService | None = None
        self.banks: BankService | None = None
        self.bank_writer: BankWriter | None = None
        self.watcher: TranscriptWatcher | None = None

    def run(self) -> int:
        started = time.monotonic()
        endpoint = paths.endpoint()
        if not endpoint.startswith("ipc://"):
            # SPEC §4: TCP only with CURVE keys, which are not implemented yet.
            raise runtime.UnsafeRuntimeDir(
                f"refusing to serve {endpoint}: only ipc:// sockets are supported (TCP would "
                "need CURVE authentication)"
            )
        ipc = paths.ipc_path(endpoint)
        socket_path = Path(ipc) if ipc else None
        run_dir = Path(paths.runtime_dir())
        with contextlib.ExitStack() as stack:
            runtime.prepare_private_dir(run_dir)
            lock = runtime.InstanceLock(run_dir / "memoryd.lock")
            lock.acquire()
            stack.callback(lock.release)

            errors = BackgroundErrors()
            errors.on_record = lambda e: self.log.warning(
                "background_error", description=e.description, severity=e.severity
            )
            data_root = config.data_dir(self.settings)
            data_root.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.registry = ProjectRegistry(data_root, self.settings.storage, errors)
            stack.callback(self.registry.close)

            zctx: zmq.Context[Any] = zmq.Context()
            stack.callback(zctx.term)
            recall = Recall(
                self.settings.retrieval.to_core(),
                SloMonitor(
                    window=self.settings.slo.window,
                    degrade_above_ms=self.settings.slo.degrade_above_ms,
                    recover_below_ms=self.settings.slo.recover_below_ms,
                    min_samples=self.settings.slo.min_samples,
                ),
                default_ceiling=self.settings.retrieval.budget_ceiling,
                log=self.log,
            )
            self.capture = self._capture(errors)
            self.banks = self._banks(self.registry, zctx, errors, data_root)
            context = DaemonContext(
                self.registry,
                errors,
                endpoint,
                self._request_stop,
                recall,
                self.capture,
                self.banks,
            )
            self.server = Server(
                zctx,
                context,
                max_message_bytes=self.settings.server.max_message_bytes,
                reply_cache_size=self.settings.server.reply_cache_size,
                on_internal=self._on_internal,
                log=self.log,
            )
            stack.callback(self.server.close)
            # Before the server closes: the writer's last reports still reach the mailbox.
            stack.callback(self._final_bank_sync)
            if socket_path is not None:
                # We hold the lock, so a socket file left here is a dead daemon's.
                socket_path.unlink(missing_ok=True)
                stack.callback(socket_path.unlink, missing_ok=True)
            with runtime.private_umask():
                self.server.bind(endpoint)

            self.jobs = Jobs(
                zctx,
                index_commit_s=self.settings.jobs.index_commit_s,
                capture_idle_s=self.settings.jobs.capture_idle_check_s,
                quarantine_s=self.settings.jobs.quarantine_check_s,
                bank_sync_s=self.settings.banks.sync_interval_s,
            )
            self.jobs.start()
            stack.callback(self.jobs.shutdown)
            if self.capture is not None:
                stack.callback(self.capture.save_cursors)
            # Always: with capture off, the watcher still watches the memory banks.
            stack.enter_context(self._watching(zctx))

            runtime.notify_systemd("READY=1")
            ready_ms = round((time.monotonic() - started) * 1000, 1)
            self.log.info(
                "started",
                version=__version__,
                protocol=p.PROTOCOL_VERSION,
                pid=os.getpid(),
                socket=endpoint,
                data_dir=str(data_root),
                ms=ready_ms,
            )
            self.server.serve()
            runtime.notify_systemd("STOPPING=1")
        self.log.info("stopped")
        return 0

    def _banks(
        self,
        registry: ProjectRegistry,
        zctx: zmq.Context[Any],
        errors: BackgroundErrors,
        data_root: Path,
    ) -> BankService:
        settings = self.settings.banks
        self.bank_writer = BankWriter(lambda: messages.post(zctx, messages.BanksWritten()))
        cache = BankCache(
            BankJournal(data_root / "bank-journal.jsonl"),
            self.bank_writer.submit,
            errors,
            conflicts_dir=data_root / "bank-conflicts",
            immediate_bytes=settings.sync_immediate_bytes,
            dump_path=config.state_dir() / "cache_memory_dump.json"
            if settings.debug_dump
            else None,
        )
        self.bank_writer.start()
        cache.sync()  # changes a crash left pending go to disk now, not a minute from now
        service = BankService(
            registry,
            InstructionConfig.from_environ(os.environ),
            cache,
            sync_interval_s=settings.sync_interval_s,
            llm=build_llm(settings, os.environ),
            bank_roots=[Path(os.path.expanduser(r)) for r in settings.memory_bank_roots],
            read_only_modes=settings.read_only_modes,
        )
        service.wake = lambda: messages.post(zctx, messages.Wake())
        return service

    def _final_bank_sync(self) -> None:
        """SIGTERM or shutdown: pending bank changes are written before the daemon exits, those
        made while the writer had their file included. A write that fails is not retried here:
        it stays in the journal and is written at the next start. Bounded by a deadline."""
        if self.banks is None or self.bank_writer is None:
            return
        cache, writer = self.banks.cache, self.bank_writer
        deadline = time.monotonic() + FINAL_SYNC_S
        cache.sync(retry_failed=False)
        while cache.busy():
            result = writer.next_result(deadline - time.monotonic())
            if result is None:
                self.log.error("bank_final_sync_timeout", pending=cache.pending())
                break
            self.banks.written([result, *writer.results()])
            cache.sync(retry_failed=False)
        if not writer.stop():
            self.log.error("bank_writer_hung")
        cache.close()

    def _capture(self, errors: BackgroundErrors) -> CaptureService | None:
        settings = self.settings.capture
        if not settings.enabled:
            return None
        assert self.registry is not None
        return CaptureService(
            self.registry,
            errors,
            cursor_file=config.state_dir() / "capture-cursors.json",
            rules=(*DEFAULT_RULES, *load_user_rules(settings.rules)),
            checkpoint_every=settings.checkpoint_every,
            idle_minutes=settings.idle_minutes,
            default_preset=settings.preset,
            log=self.log,
        )

    @contextlib.contextmanager
    def _watching(self, zctx: zmq.Context[Any]) -> Iterator[None]:
        """The watcher thread only posts file names; the owner thread reads them. Files changed
        while the daemon was down are queued the same way, after the socket is already up. With
        capture disabled no transcript root is watched, only the memory banks."""
        settings = self.settings.capture
        roots = [
            WatchRoot(os.path.expanduser(r.path), r.agent)
            for r in (settings.roots if self.capture is not None else [])
        ]

        def changed(path: str) -> None:
            messages.post(zctx, messages.FileChanged(path))

        watcher = TranscriptWatcher(roots, changed, debounce_s=settings.debounce_s)
        self.watcher = watcher
        try:
            watcher.start()
            if watcher.missing_roots:
                self.log.info("capture_roots_missing", roots=watcher.missing_roots)
            if self.capture is not None and self.server is not None:
                self.capture.queue(watcher.scan(settings.backfill_days, time.time()))
                self.server.idle_work = self.capture.work_backlog
            self._watch_banks(watcher)
            yield
        finally:
            watcher.stop()

    def _watch_appeared_roots(self) -> None:
        """A transcript folder missing at start (the agent was installed later) is watched once
        it exists, and what it already holds is caught up."""
        if self.watcher is None or self.capture is None:
            return
        appeared = self.watcher.watch_missing()
        if appeared:
            self.log.info("capture_roots_appeared", roots=[r.path for r in appeared])
            backfill = self.settings.capture.backfill_days
            self.capture.queue(self.watcher.scan(backfill, time.time(), roots=appeared))

    def _watch_banks(self, watcher: TranscriptWatcher) -> None:
        """External edits of decisionLog.md / progress.md become entries (SPEC §9): each open
        project's memory-bank/ is watched, from when it opens or its bank is created."""
        assert self.registry is not None and self.banks is not None
        accept = BankService.is_lifecycle_file

        def watch(root: Path) -> None:
            watcher.watch_folder(str(root / "memory-bank"), accept)

        self.registry.on_open = lambda project: watch(project.root)
        self.banks.on_bank_created = watch
        for project in self.registry.opened():
            watch(project.root)

    def _request_stop(self, reason: str) -> None:
        if self.server is not None and not self.server.stopping:
            self.log.info("stopping", reason=reason)
            self.server.stopping = True
            if reason == "shutdown request":
                self.server.watch_disconnects()

    def _on_internal(self, message: messages.Internal) -> None:
        match message:
            case messages.StopRequested(reason=reason):
                self._request_stop(reason)
            case messages.ReloadRequested():
                self._reload()
            case messages.FileChanged(path=path):
                if self.banks is not None and BankService.is_lifecycle_file(path):
                    self.banks.file_changed(path)
                elif self.capture is not None:
                    self.capture.file_changed(path)
            case messages.Tick(job="index_commit"):
                assert self.registry is not None
                for project in self.registry.opened():
                    project.catch_up()
                    project.flush_accesses()
                    project.sync_index()
                if self.capture is not None:
                    self.capture.save_cursors()
            case messages.Wake():
                pass  # the loop looks at parked requests after every message
            case messages.BanksWritten():
                if self.banks is not None and self.bank_writer is not None:
                    self.banks.written(self.bank_writer.results())
            case messages.Tick(job="bank_sync"):
                if self.banks is not None:
                    self.banks.sync_due()
            case messages.Tick(job="capture_idle"):
                if self.capture is not None:
                    self._watch_appeared_roots()
                    self.capture.finalize_idle()
            case messages.Tick(job="quarantine"):
                assert self.registry is not None
                for project in self.registry.opened():
                    project.review_quarantine(time.time())
            case messages.Tick(job=job):
                self.log.warning("unknown_job", job=job)

    def _reload(self) -> None:
        try:
            fresh = config.load(self.config_file)
        except config.ConfigError as exc:
            self.log.error("reload_failed", error=str(exc))
            assert self.server is not None
            self.server.context.errors.record(f"configuration not reloaded: {exc}")
            return
        logs.configure(fresh.logging.level, _log_file(fresh))
        if self.jobs is not None and (
            fresh.jobs != self.settings.jobs
            or fresh.banks.sync_interval_s != self.settings.banks.sync_interval_s
        ):
            self.jobs.reschedule(
                index_commit_s=fresh.jobs.index_commit_s,
                bank_sync_s=fresh.banks.sync_interval_s,
            )
        restart_needed = [
            s for s in ("server", "storage") if getattr(fresh, s) != getattr(self.settings, s)
        ]
        self.settings = fresh
        self.log = logs.get()
        self.log.info("reloaded", needs_restart_for=restart_needed)


def _log_file(settings: config.Settings) -> Path | None:
    return config.state_dir() / "memoryd.log" if settings.logging.file else None


def run(config_file: Path | None, overrides: dict[str, Any]) -> int:
    settings = config.load(config_file, **overrides)
    logs.configure(settings.logging.level, _log_file(settings))
    try:
        return Daemon(settings, config_file).run()
    finally:
        logs.close()
