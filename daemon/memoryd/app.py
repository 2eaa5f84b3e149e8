"""The composition root: settings → logging → runtime dir and lock → registry → recall, capture,
banks → watcher, jobs → server, built into one frozen ``Parts`` and torn down in reverse. The only
place where the parts meet, and the only one that reads configuration (at start and on SIGHUP)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from memctl import __version__, paths
from memctl import protocol as p
from memoryd import atomic, config, logs, memtrim, messages, runtime
from memoryd.background import BackgroundErrors
from memoryd.banks.cache import BankCache
from memoryd.banks.journal import BankJournal
from memoryd.banks.service import BankService, build_llm
from memoryd.banks.writer import BankWriter
from memoryd.capture.service import CaptureService
from memoryd.capture.watcher import TranscriptWatcher, WatchRoot
from memoryd.compactor import Compactor
from memoryd.core.capture.rules import DEFAULT_RULES, load_user_rules
from memoryd.core.recall.slo import SloMonitor
from memoryd.instructions.loader import InstructionConfig
from memoryd.jobs import Jobs
from memoryd.recall import Recall
from memoryd.registry import ProjectRegistry
from memoryd.server import gate
from memoryd.server.context import DaemonContext
from memoryd.server.loop import Server
from memoryd.share import ShareService, ShareWriter, is_share_file

FINAL_SYNC_S = 10.0  # the most a stop waits for bank files to be written


@dataclass(frozen=True)
class Parts:
    """Everything a running daemon is made of, built in this order and torn down in reverse."""

    zctx: zmq.Context[Any]
    errors: BackgroundErrors
    registry: ProjectRegistry
    recall: Recall
    capture: CaptureService | None
    bank_writer: BankWriter
    banks: BankService
    share_writer: ShareWriter
    share: ShareService
    watcher: TranscriptWatcher
    jobs: Jobs
    server: Server


class Daemon:
    def __init__(
        self, settings: config.Settings, config_file: Path | None, overrides: dict[str, Any]
    ) -> None:
        self.settings = settings
        self.config_file = config_file
        self.overrides = overrides
        self.log: Any = logs.get()

    def run(self) -> int:
        started = time.monotonic()
        endpoint = paths.endpoint()
        if not endpoint.startswith("ipc://"):
            # design §4: TCP only with CURVE keys, which are not implemented yet.
            raise runtime.UnsafeRuntimeDir(
                f"refusing to serve {endpoint}: only ipc:// sockets are supported (TCP would "
                "need CURVE authentication)"
            )
        # One descriptor per client connection: as many as the hard limit allows.
        _, fd_limit = gate.raise_fd_limit()
        if fd_limit < gate.LIMIT_LOW:
            self.log.warning("fd_limit_low", limit=fd_limit, enough=gate.LIMIT_LOW)
        with contextlib.ExitStack() as stack:
            parts = self._build(stack, endpoint)
            runtime.notify_systemd("READY=1")
            self.log.info(
                "started",
                version=__version__,
                protocol=p.PROTOCOL_VERSION,
                pid=os.getpid(),
                socket=endpoint,
                data_dir=str(config.data_dir(self.settings)),
                fd_limit=fd_limit,
                ms=round((time.monotonic() - started) * 1000, 1),
            )
            parts.server.serve()
            runtime.notify_systemd("STOPPING=1")
        self.log.info("stopped")
        return 0

    def _build(self, stack: contextlib.ExitStack, endpoint: str) -> Parts:
        """Each part from the ones before it; each teardown registered as its part is made."""
        _lock_data_dir(stack, config.data_dir(self.settings))
        runtime.prepare_private_dir(Path(paths.runtime_dir()))
        errors = BackgroundErrors()
        errors.on_record = lambda e: self.log.warning(
            "background_error", description=e.description, severity=e.severity
        )
        registry = self._registry(stack, errors)
        zctx: zmq.Context[Any] = zmq.Context()
        stack.callback(zctx.term)
        recall = self._recall()
        capture = self._capture(registry, errors)
        bank_writer = BankWriter(lambda: messages.post(zctx, messages.BanksWritten()))
        banks = self._banks(registry, bank_writer, errors)
        share_writer = ShareWriter(lambda: messages.post(zctx, messages.SharesWritten()))
        share = ShareService(registry, share_writer, errors, log=self.log)
        share_writer.start()
        registry.on_open.append(share.on_open)
        watcher = self._watcher(zctx, capture)
        jobs = self._jobs(zctx)
        compactor = Compactor(registry.opened)
        # A run waiting on the index's background commit sleeps until the commit wakes it.
        registry.on_open.append(lambda project: project.on_index_committed(_waker(zctx)))
        registry.on_open.append(compactor.on_open)
        parts = Parts(
            zctx,
            errors,
            registry,
            recall,
            capture,
            bank_writer,
            banks,
            share_writer,
            share,
            watcher,
            jobs,
            server=self._server(
                zctx,
                endpoint,
                errors,
                registry,
                compactor,
                recall,
                capture,
                banks,
                bank_writer,
                share,
                share_writer,
                watcher,
                jobs,
            ),
        )
        stack.callback(parts.server.close)
        # Before the server closes: the writer's last reports still reach the mailbox.
        stack.callback(_final_bank_sync, banks, bank_writer, self.log)
        stack.callback(_final_share_write, share, share_writer, self.log)
        _bind(stack, parts.server, endpoint)
        jobs.start()
        stack.callback(jobs.shutdown)
        if capture is not None:
            stack.callback(capture.save_cursors)
            # Runs before the cursors are saved: a session still open is over for this daemon.
            stack.callback(capture.finalize_all, "shutdown")
        # Always: with capture off, the watcher still watches the memory banks.
        stack.enter_context(self._watching(parts))
        return parts

    def _registry(self, stack: contextlib.ExitStack, errors: BackgroundErrors) -> ProjectRegistry:
        data_root = config.data_dir(self.settings)
        data_root.mkdir(parents=True, exist_ok=True, mode=0o700)
        registry = ProjectRegistry(data_root, self.settings.storage, errors)
        stack.callback(registry.close)
        return registry

    def _recall(self) -> Recall:
        return Recall(
            self.settings.retrieval.to_core(),
            _slo_monitor(self.settings.slo),
            default_ceiling=self.settings.retrieval.budget_ceiling,
            instructions_share=self.settings.instructions.budget_percent / 100,
            log=self.log,
        )

    def _capture(
        self, registry: ProjectRegistry, errors: BackgroundErrors
    ) -> CaptureService | None:
        settings = self.settings.capture
        if not settings.enabled:
            return None
        return CaptureService(
            registry,
            errors,
            cursor_file=config.state_dir() / "capture-cursors.json",
            rules=(*DEFAULT_RULES, *load_user_rules(settings.rules)),
            checkpoint_every=settings.checkpoint_every,
            idle_minutes=settings.idle_minutes,
            hook_wait_s=settings.hook_wait_s,
            default_preset=settings.preset,
            log=self.log,
            roots=[(os.path.expanduser(r.path), r.agent) for r in settings.roots],
        )

    def _banks(
        self, registry: ProjectRegistry, writer: BankWriter, errors: BackgroundErrors
    ) -> BankService:
        settings = self.settings.banks
        data_root = config.data_dir(self.settings)
        cache = BankCache(
            BankJournal(data_root / "bank-journal.jsonl"),
            writer.submit,
            errors,
            conflicts_dir=data_root / "bank-conflicts",
            immediate_bytes=settings.sync_immediate_bytes,
            dump_path=config.state_dir() / "cache_memory_dump.json"
            if settings.debug_dump
            else None,
        )
        writer.start()
        cache.sync()  # changes a crash left pending go to disk now, not a minute from now
        return BankService(
            registry,
            _instruction_config(self.settings.instructions),
            cache,
            sync_interval_s=settings.sync_interval_s,
            llm=build_llm(settings, os.environ),
            bank_roots=[Path(os.path.expanduser(r)) for r in settings.memory_bank_roots],
            read_only_modes=settings.read_only_modes,
        )

    def _watcher(self, zctx: zmq.Context[Any], capture: CaptureService | None) -> TranscriptWatcher:
        """With capture disabled no transcript root is watched, only the memory banks."""
        settings = self.settings.capture
        roots = [
            WatchRoot(os.path.expanduser(r.path), r.agent)
            for r in (settings.roots if capture is not None else [])
        ]

        def changed(path: str) -> None:
            messages.post(zctx, messages.FileChanged(path))

        return TranscriptWatcher(roots, changed, debounce_s=settings.debounce_s)

    def _jobs(self, zctx: zmq.Context[Any]) -> Jobs:
        return Jobs(zctx, **_intervals(self.settings))

    def _server(
        self,
        zctx: zmq.Context[Any],
        endpoint: str,
        errors: BackgroundErrors,
        registry: ProjectRegistry,
        compactor: Compactor,
        recall: Recall,
        capture: CaptureService | None,
        banks: BankService,
        bank_writer: BankWriter,
        share: ShareService,
        share_writer: ShareWriter,
        watcher: TranscriptWatcher,
        jobs: Jobs,
    ) -> Server:
        banks.wake = lambda: messages.post(zctx, messages.Wake())
        context = DaemonContext(
            registry,
            errors,
            endpoint,
            recall,
            reload=lambda: self._reload(errors, recall, capture, banks, jobs),
            log=self.log,
            capture=capture,
            banks=banks,
            bank_writer=bank_writer,
            watcher=watcher,
            backfill_days=self.settings.capture.backfill_days,
            compactor=compactor,
            share=share,
            share_writer=share_writer,
            keep_socket=lambda: server.keep_socket(),
        )
        server = Server(
            zctx,
            context,
            max_message_bytes=self.settings.server.max_message_bytes,
            reply_cache_size=self.settings.server.reply_cache_size,
            log=self.log,
            idle_work=_idle_work(registry, capture, compactor, share),
            readers=self.settings.server.readers,
        )
        return server

    @contextlib.contextmanager
    def _watching(self, parts: Parts) -> Iterator[None]:
        """The watcher thread only posts file names; the owner thread reads them. Files changed
        while the daemon was down are queued the same way, after the socket is already up."""
        watcher = parts.watcher
        try:
            watcher.start()
            if watcher.missing_roots:
                self.log.info("capture_roots_missing", roots=watcher.missing_roots)
            if parts.capture is not None:
                backfill = self.settings.capture.backfill_days
                parts.capture.queue(watcher.scan(backfill, time.time()))
            _watch_banks(watcher, parts.registry, parts.banks)
            parts.share.watch = lambda folder: watcher.watch_folder(str(folder), is_share_file)
            yield
        finally:
            watcher.stop()

    def _reload(
        self,
        errors: BackgroundErrors,
        recall: Recall,
        capture: CaptureService | None,
        banks: BankService,
        jobs: Jobs,
    ) -> None:
        """SIGHUP: apply every setting that can change live; name the changed ones that cannot
        (``needs_restart_for``), in the log and to the next client."""
        try:
            fresh = config.load(self.config_file, **self.overrides)
        except config.ConfigError as exc:
            self.log.error("reload_failed", error=str(exc))
            errors.record(f"configuration not reloaded: {exc}")
            return
        plan = config.plan_reload(self.settings, fresh)
        _configure_logs(fresh)
        self.log = logs.get()
        jobs.reschedule(**_intervals(fresh))
        slo_changed = fresh.slo != self.settings.slo
        recall.configure(
            fresh.retrieval.to_core(),
            fresh.retrieval.budget_ceiling,
            _slo_monitor(fresh.slo) if slo_changed else None,
        )
        if capture is not None:
            capture.default_preset = fresh.capture.preset
            capture.idle_s = fresh.capture.idle_minutes * 60
            capture.checkpoint_every = fresh.capture.checkpoint_every
            capture.hook_wait_s = fresh.capture.hook_wait_s
        banks.sync_interval_s = fresh.banks.sync_interval_s  # what bank activate reports
        # What was not applied keeps its running value, so that the next reload still names it.
        self.settings = _keep_unapplied(self.settings, fresh)
        self.log.info(
            "reloaded", applied=list(plan.applied), needs_restart_for=list(plan.needs_restart_for)
        )
        if plan.needs_restart_for:
            errors.record(
                "configuration reloaded; restart memoryd to apply: "
                + ", ".join(plan.needs_restart_for),
                severity="warning",
            )


def _lock_data_dir(stack: contextlib.ExitStack, data_root: Path) -> None:
    """One daemon per data directory: the lock lives with the data it guards, not in the runtime
    directory, which logind removes under a running daemon at logout."""
    data_root.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = runtime.InstanceLock(data_root / "lock")
    lock.acquire()
    stack.callback(lock.release)


def _bind(stack: contextlib.ExitStack, server: Server, endpoint: str) -> None:
    ipc = paths.ipc_path(endpoint)
    if ipc:
        socket_path = Path(ipc)
        runtime.claim_socket(socket_path)
        stack.callback(socket_path.unlink, missing_ok=True)
    server.bind(endpoint)


def _watch_banks(watcher: TranscriptWatcher, registry: ProjectRegistry, banks: BankService) -> None:
    """External edits of decisionLog.md / progress.md become entries (design §9): each open
    project's memory-bank/ is watched, from when it opens or its bank is created."""
    accept = BankService.is_lifecycle_file

    def watch(root: Path) -> None:
        watcher.watch_folder(str(root / "memory-bank"), accept)

    registry.on_open.append(lambda project: watch(project.root))
    banks.on_bank_created = watch
    for project in registry.opened():
        watch(project.root)

    def watch_instructions(folders: Iterable[Path]) -> None:
        # Instruction files are watched once loaded (files show, save_memory, a payload): an
        # edit, or an import created, reloads them.
        for folder in folders:
            watcher.watch_folder(str(folder), banks.is_instruction_file)

    banks.on_instructions_loaded = watch_instructions


def _instruction_config(settings: config.InstructionsSettings) -> InstructionConfig:
    """The ``[instructions]`` settings over this user's defaults (XDG folders, home)."""
    base = InstructionConfig.from_environ(os.environ)
    plugins = os.path.expanduser(settings.plugins_dir) if settings.plugins_dir else None
    return dataclasses.replace(
        base,
        file_name=settings.file_name,
        max_depth=settings.max_depth,
        plugins_dir=Path(plugins) if plugins else base.global_dir / "plugins",
        trusted_folders=tuple(Path(os.path.expanduser(f)) for f in settings.trusted_folders),
    )


def _final_bank_sync(banks: BankService, writer: BankWriter, log: Any) -> None:
    """SIGTERM or shutdown: pending bank changes are written before the daemon exits, those
    made while the writer had their file included. A write that fails is not retried here:
    it stays in the journal and is written at the next start. Bounded by a deadline."""
    cache = banks.cache
    deadline = time.monotonic() + FINAL_SYNC_S
    cache.sync_except_failed()
    while cache.busy():
        result = writer.next_result(deadline - time.monotonic())
        if result is None:
            log.error("bank_final_sync_timeout", pending=cache.pending())
            break
        banks.written([result, *writer.results()])
        cache.sync_except_failed()
    if not writer.stop():
        log.error("bank_writer_hung")
    cache.close()


def _final_share_write(share: ShareService, writer: ShareWriter, log: Any) -> None:
    """SIGTERM or shutdown: the shared files get the last changes (bounded by a deadline; a
    file not written now is written when its project next opens)."""
    share.flush(time.monotonic() + FINAL_SYNC_S)
    if not writer.stop():
        log.error("share_writer_hung")


def _slo_monitor(settings: config.SloSettings) -> SloMonitor:
    return SloMonitor(
        window=settings.window,
        degrade_above_ms=settings.degrade_above_ms,
        recover_below_ms=settings.recover_below_ms,
        min_samples=settings.min_samples,
    )


def _waker(zctx: zmq.Context[Any]) -> Callable[[], None]:
    """Wake the owner thread from the index's committer thread."""

    def wake() -> None:
        with contextlib.suppress(zmq.ZMQError):  # the daemon is stopping: nobody to wake
            messages.post(zctx, messages.Wake())

    return wake


def _idle_work(
    registry: ProjectRegistry,
    capture: CaptureService | None,
    compactor: Compactor,
    share: ShareService,
) -> Callable[[], bool]:
    """A piece of each kind of background work per loop turn: a page of an index rebuild, a
    transcript queued at start, then a step of compaction (none while a rebuild goes on: a
    search waits for the rebuild, and compaction's index updates would too); and the shared
    files of projects that changed go to their writer."""

    def work() -> bool:
        rebuilding = any(project.index_rebuild_step() for project in registry.opened())
        more = capture.work_backlog() if capture is not None else False
        share.step()
        if rebuilding:
            return True
        return compactor.step() or more

    return work


def _intervals(settings: config.Settings) -> dict[str, float]:
    return {
        "index_commit_s": settings.jobs.index_commit_s,
        "capture_idle_s": settings.jobs.capture_idle_check_s,
        "quarantine_s": settings.jobs.quarantine_check_s,
        "bank_sync_s": settings.banks.sync_interval_s,
        "compaction_s": settings.jobs.compaction_s,
    }


def _keep_unapplied(running: config.Settings, fresh: config.Settings) -> config.Settings:
    """``fresh``, except settings that need a restart keep the value the daemon runs with."""
    sections: dict[str, Any] = {}
    for section in config.Settings.model_fields:
        live = config.LIVE_SETTINGS.get(section, frozenset())
        before = getattr(running, section).model_dump()
        after = getattr(fresh, section).model_dump()
        sections[section] = {k: after[k] if k in live else before[k] for k in after}
    return config.Settings.model_validate(sections)


def _configure_logs(settings: config.Settings) -> None:
    logs.configure(
        settings.logging.level,
        _log_file(settings),
        max_bytes=settings.logging.max_bytes,
        backups=settings.logging.backups,
    )


def _log_file(settings: config.Settings) -> Path | None:
    return config.state_dir() / "memoryd.log" if settings.logging.file else None


def run(config_file: Path | None, overrides: dict[str, Any]) -> int:
    memtrim.tune()  # glibc's malloc, before any thread starts (see memtrim)
    # Every file and directory the daemon makes for itself is private, as its unit's UMask makes
    # them; those it makes in a project say their mode (``atomic.make_repository_dir``).
    os.umask(atomic.PRIVATE_UMASK)
    settings = config.load(config_file, **overrides)
    _configure_logs(settings)
    try:
        return Daemon(settings, config_file, overrides).run()
    finally:
        logs.close()
