"""The memory bank and instruction file operations the handlers call (design §9 lifecycle, §10,
§11): each request reaches only the bank of the project its working directory resolves to.

Banks are read and changed through the in-memory cache (``memoryd.banks.cache``): a change is
journaled and acknowledged, and the FIFO writer thread (``memoryd.banks.writer``) puts it on disk
at the next sync. ``bank_init`` is the exception: it only creates files that do not exist, and
writes them at once.

After every daemon-side change to decisionLog.md or progress.md the lifecycle import runs, so new
decisions and completed items become entries at once; edits made outside the daemon arrive
through the watcher (``file_changed``) or an explicit ``ingest_lifecycle``.

``bank_process`` with an LLM configured sends the text, redacted, to the endpoint from a worker
thread (``route_async``), so the owner thread keeps serving every other client while the endpoint
thinks; the handler parks the request until the answer (or the fallback to rules) is there.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Literal, TypeVar

import msgspec

from memctl import protocol as p
from memoryd.banks.cache import BankCache, Submit
from memoryd.banks.files import Bank, report
from memoryd.banks.llm import LlmProcessor, ProcessResult, process_content
from memoryd.banks.paths import BANK_DIRNAME
from memoryd.banks.scan import find_banks
from memoryd.banks.writer import FlushResult
from memoryd.config import BanksSettings
from memoryd.core import entries as core_entries
from memoryd.core.bank import model as core_bank
from memoryd.core.bank import modes
from memoryd.core.bank.apply import apply_items
from memoryd.core.bank.lifecycle import lifecycle_items
from memoryd.core.bank.modes import Access
from memoryd.core.bank.ops import ApplyItems, check_size
from memoryd.core.bank.optimise import WARN_TOKENS, optimise, optimise_ops
from memoryd.core.bank.router import route
from memoryd.core.capture.findings import truncate
from memoryd.core.errors import MemorydError
from memoryd.core.events import BankFileSynced, BankOptimised
from memoryd.core.instructions import Segment
from memoryd.core.redaction import redact
from memoryd.instructions.loader import InstructionConfig, InstructionFiles
from memoryd.project import ProjectMemory
from memoryd.registry import ProjectRegistry
from memoryd.worker import Worker

LIFECYCLE_FILES = frozenset({core_bank.DECISION_LOG, core_bank.PROGRESS})
LIFECYCLE_TAG = "memory-bank"
_T = TypeVar("_T")


def build_llm(settings: BanksSettings, environ: Mapping[str, str]) -> LlmProcessor | None:
    """The configured LLM processor, or None when no endpoint and model are set. The key is
    read from the environment variable the settings name, never from the file."""
    if not settings.llm_base_url or not settings.llm_model:
        return None
    key = environ.get(settings.llm_api_key_env) if settings.llm_api_key_env else None
    return LlmProcessor(
        settings.llm_base_url, settings.llm_model, key, timeout_s=settings.llm_timeout_s
    )


class BankService:
    def __init__(
        self,
        registry: ProjectRegistry,
        instructions: InstructionConfig,
        cache: BankCache,
        *,
        sync_interval_s: float = 60.0,
        llm: LlmProcessor | None = None,
        bank_roots: Sequence[Path] = (),
        read_only_modes: Iterable[str] = ("ask",),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._registry = registry
        self.cache = cache
        self.sync_interval_s = sync_interval_s  # the job's interval; SIGHUP may change it
        self._sync_requests: OrderedDict[str, None] = OrderedDict()
        self._instruction_config = instructions
        self._llm = llm
        self._worker = Worker("memoryd-llm")
        self._routing: dict[str, tuple[Future[ProcessResult], float]] = {}
        self._bank_roots = tuple(bank_roots)
        self._read_only = frozenset(m.casefold() for m in read_only_modes)
        self._clock = clock
        self._instructions: dict[Path, InstructionFiles] = {}
        # Every instruction file of a loaded project → the projects it belongs to. Replaced, never
        # changed in place: the watcher's thread reads it (``is_instruction_file``).
        self._instruction_paths: dict[str, frozenset[Path]] = {}
        # Set by the composition root: wake the owner thread (from any thread) when work a
        # parked request waits on is done.
        self.wake: Callable[[], None] = lambda: None
        # Set by the composition root: watch a bank folder once it exists.
        self.on_bank_created: Callable[[Path], None] | None = None
        # Set by the composition root: watch the folders of a project's instruction files.
        self.on_instructions_loaded: Callable[[Iterable[Path]], None] | None = None

    # -- the bank ---------------------------------------------------------------------------

    def _project(self, cwd: str | None) -> tuple[ProjectMemory, Bank]:
        project = self._registry.get(cwd)
        return project, Bank(project.root)

    def access(self, mode: str | None) -> Access:
        """What ``mode`` may read and change (design §10), the configured read-only modes on
        top."""
        return modes.access(mode, self._read_only)

    def _check_writable(self, mode: str | None, names: Sequence[str] = ()) -> None:
        self.access(mode).check_write(names)

    def init(self, cwd: str | None, brief: str | None) -> p.BankInitResult:
        project, bank = self._project(cwd)
        made = bank.init(brief, exists=lambda name: self.cache.exists(project.root, name))
        if self.on_bank_created is not None:
            self.on_bank_created(project.root)
        self._after_write(project, made.created)
        return p.BankInitResult(created=made.created, existing=made.existing)

    def validate(self, cwd: str | None) -> p.BankValidateResult:
        root = self._registry.get(cwd).root
        return _convert(report(*self.cache.contents(root)), p.BankValidateResult)

    def read(self, cwd: str | None, name: str) -> p.BankReadResult:
        content, modified = self.cache.read(self._registry.get(cwd).root, name)
        return p.BankReadResult(content=content, last_modified=modified)

    def write(
        self, cwd: str | None, name: str, content: str, mode: str | None, *, request: str = ""
    ) -> p.BankWriteResult:
        """Create or replace a whole file (decisionLog.md: only keeping its existing entries)."""
        # What the daemon writes is redacted like an entry (design §6); a user's own edits on
        # disk are theirs, and `bank validate` reports a secret in them. Its size first: no
        # work on a content the file could never hold.
        check_size(name, content)
        submit = partial(self.cache.write, name=name, content=redact(content).text, request=request)
        return self._change(cwd, mode, name, submit)

    def update(
        self, cwd: str | None, name: str, content: str, mode: str | None, *, request: str = ""
    ) -> p.BankWriteResult:
        """Merge sections into an existing file (``memoryd.core.bank.update``)."""
        check_size(name, content)  # before redaction and the merge
        submit = partial(
            self.cache.update, name=name, content=redact(content).text, request=request
        )
        return self._change(cwd, mode, name, submit)

    def _change(
        self, cwd: str | None, mode: str | None, name: str, submit: Callable[[Path], Submit]
    ) -> p.BankWriteResult:
        self._check_writable(mode)  # before the name is even looked at: a read-only mode
        project, bank = self._project(cwd)
        self._check_writable(mode, [bank.locate(name)[1]])  # the real file, not a link to it
        submitted = submit(project.root)  # journaled from here on: the change has happened
        ingested = self._ingest_after_change(project, [submitted.name])
        return p.BankWriteResult(
            success=True, path=str(submitted.path), ingested=ingested, sync=submitted.sync
        )

    def list_files(self, cwd: str | None) -> p.BankListResult:
        infos = self.cache.listing(self._registry.get(cwd).root)
        return p.BankListResult(files=[_convert(i, p.BankFileInfo) for i in infos])

    def activate(self, cwd: str | None, mode: str | None, files: list[str]) -> p.BankActivateResult:
        project, bank = self._project(cwd)
        contents = self.cache.contents(project.root)
        activation = bank.activate(mode, files, contents, access=self.access(mode))
        return p.BankActivateResult(
            bank_info=_convert(activation.bank_info, p.BankInfo),
            content=activation.content,
            custom_instructions=[
                _convert(rule, p.CustomInstruction) for rule in activation.custom_instructions
            ],
            cache=self.cache.describe(project.root, self.sync_interval_s),
        )

    def route_async(
        self, request: str, cwd: str | None, content: str, *, apply: bool, mode: str | None
    ) -> Future[ProcessResult] | None:
        """With an LLM configured, start routing ``content`` on the LLM worker thread (once per
        request) and return its future; None when routing is done by rules on the spot, or the
        request id cannot tell a re-run (then ``process`` asks the LLM itself). Whatever would
        refuse the request is checked first, so a refusal is never kept waiting."""
        if self._llm is None or not request:
            return None
        if apply:
            self._check_writable(mode)
        self._registry.get(cwd)
        self._forget_stale_routing()
        known = self._routing.get(request)
        if known is not None:
            return known[0]
        text, llm, now = redact(content).text, self._llm, datetime.now(UTC)
        start_by = time.monotonic() + llm.timeout_s
        future = self._worker.submit(partial(_route_in_time, text, llm, now, start_by))
        future.add_done_callback(lambda _done: self.wake())  # runs on the worker thread
        self._routing[request] = (future, time.monotonic())
        return future

    def _forget_stale_routing(self) -> None:
        """Answers nobody came back for (the request was parked past its deadline): every
        request waits at most ``llm_wait_s``, so older finished ones can go."""
        cutoff = time.monotonic() - 2 * self.llm_wait_s
        for request, (future, since) in list(self._routing.items()):
            if since < cutoff and future.done():
                del self._routing[request]

    @property
    def llm_wait_s(self) -> float:
        """How long a request may wait for the LLM: in the worker's queue at most the LLM
        timeout (then the rules answer instead), the call itself at most twice it (connecting
        and reading are timed separately), and a margin."""
        return 3 * (self._llm.timeout_s if self._llm is not None else 0.0) + 5.0

    def process(
        self, cwd: str | None, content: str, *, apply: bool, mode: str | None, request: str = ""
    ) -> p.BankProcessResult:
        if apply:
            self._check_writable(mode)
        project = self._registry.get(cwd)
        now = datetime.now(UTC)
        routed = self._routing.pop(request, (None, 0.0))[0] if request else None
        # Nothing unredacted leaves the machine; the rules see the text the LLM would have seen.
        if routed is None:
            processed = process_content(redact(content).text, self._llm, now)
        elif routed.done() and routed.exception() is None:
            processed = routed.result()
        else:  # cannot happen short of a bug in the worker: the rules answer, as on any failure
            reason = f"internal: {routed.exception() if routed.done() else 'not finished'}"
            processed = ProcessResult(route(redact(content).text, now), "rules", reason)
        result = p.BankProcessResult(
            items=[_convert(i, p.BankItem) for i in processed.items],
            source=processed.source,
            fallback_reason=processed.fallback_reason,
        )
        if apply and processed.items:
            self._check_writable(mode, sorted({i.target_file for i in processed.items}))
            texts, _refused = self.cache.contents(project.root)
            # Checked over every file first, so that an item refused leaves all files as they are.
            planned = apply_items(texts, processed.items, now.date())
            # Files whose text stays as it is (everything filed before) are not touched.
            changed = [name for name, text in planned.items() if text != texts.get(name)]
            for name in changed:
                items = [i for i in processed.items if i.target_file == name]
                self.cache.apply(project.root, name, ApplyItems(items, now.date()), request)
            result.applied = changed
            result.ingested = self._ingest_after_change(project, changed) if changed else 0
        return result

    def timed_out(self) -> p.BankProcessResult:
        """What a request parked on the LLM gets if even the worker's own timeout passed."""
        reason = f"timeout: the LLM worker did not answer within {self.llm_wait_s:g} s"
        return p.BankProcessResult(items=[], source="rules", fallback_reason=reason)

    def optimise(
        self, cwd: str | None, *, apply: bool, mode: str | None, request: str = ""
    ) -> p.BankOptimiseResult:
        if apply:
            self._check_writable(mode)
        project = self._registry.get(cwd)
        texts, _refused = self.cache.contents(project.root)
        return self._optimise(project, texts, apply=apply, mode=mode, request=request)

    def optimise_due(self) -> list[tuple[ProjectMemory, p.BankOptimiseResult]]:
        """The optimiser on the schedule (design §10, Bank budget; the compaction job): the bank
        of every loaded project above its budget gets what ``bank optimise --apply`` does, the
        archive first. A bank under budget, or with nothing the rules may move, is left as it
        is. Returns the banks optimised."""
        done = []
        for project in self._registry.opened():
            texts, _refused = self.cache.contents(project.root)
            if core_bank.bank_tokens(texts) <= WARN_TOKENS:
                continue
            result = self._optimise(project, texts, apply=True, mode=None, trigger="schedule")
            if result.applied:
                done.append((project, result))
        return done

    def _optimise(
        self,
        project: ProjectMemory,
        texts: dict[str, str | None],
        *,
        apply: bool,
        mode: str | None,
        request: str = "",
        trigger: Literal["request", "schedule"] = "request",
    ) -> p.BankOptimiseResult:
        now = self._clock()
        plan = optimise(texts, datetime.fromtimestamp(now).date())
        if apply:
            self._check_writable(mode, [*plan.new_files, *plan.archived])
        ops = optimise_ops(texts, plan) if apply else []
        for name, op in ops:
            self.cache.apply(project.root, name, op, request)
        if ops:
            event = BankOptimised(
                trigger=trigger,
                budget=WARN_TOKENS,
                tokens_before=plan.tokens_before,
                tokens_after=plan.tokens_after,
                changed=tuple(f"{BANK_DIRNAME}/{name}" for name in plan.new_files),
                archived=tuple(f"{BANK_DIRNAME}/{name}" for name in plan.archived),
                optimised_at=now,
            )
            try:
                project.commit(event)
            except (MemorydError, OSError) as exc:  # the change is journaled; its record failed
                self.cache.report(f"memory bank optimised in {project.root}: not audited: {exc}")
        return p.BankOptimiseResult(
            tokens_before=plan.tokens_before,
            tokens_after=plan.tokens_after,
            removed_tokens=plan.removed_tokens,
            changed=list(plan.new_files),
            archived=list(plan.archived),
            applied=bool(ops),
        )

    # -- lifecycle ----------------------------------------------------------------------------

    @staticmethod
    def is_lifecycle_file(path: str) -> bool:
        """decisionLog.md or progress.md directly in a ``memory-bank/`` folder."""
        file = Path(path)
        return file.name in LIFECYCLE_FILES and file.parent.name == "memory-bank"

    def file_changed(self, path: str) -> int:
        """A lifecycle file changed on disk (a user's edit, a ``git pull``): ingest what is new.
        Returns how many entries it added."""
        if not self.is_lifecycle_file(path):
            return 0
        project = self._registry.get(str(Path(path).parent.parent))
        self.cache.reload(project.root, Path(path).name)
        result = self._ingest(project)
        return result.decisions + result.completed

    def ingest(self, cwd: str | None) -> p.IngestResult:
        return self._ingest(self._registry.get(cwd))

    def _ingest_after_change(self, project: ProjectMemory, names: Iterable[str]) -> int:
        """The lifecycle import after a change already journaled: its failure (the database
        refuses writes) must not turn the answer into an error, since the change stands. What
        was not imported now is imported by the next import of that file."""
        try:
            return self._after_write(project, names)
        except (MemorydError, OSError) as exc:
            self.cache.report(f"memory bank of {project.root}: entries not imported yet: {exc}")
            return 0

    def _after_write(self, project: ProjectMemory, names: Iterable[str]) -> int:
        if LIFECYCLE_FILES.isdisjoint(names):
            return 0
        result = self._ingest(project)
        return result.decisions + result.completed

    def _ingest(self, project: ProjectMemory) -> p.IngestResult:
        texts, _refused = self.cache.contents(project.root)
        found = lifecycle_items(texts.get(core_bank.DECISION_LOG), texts.get(core_bank.PROGRESS))
        now = self._clock()
        candidates = [
            core_entries.new_entry(
                entry_id=uuid.uuid4().hex,
                content=core_entries.clean_content(truncate(redact(item.content).text)),
                category=item.category,
                status="confirmed",
                now=now,
                source=p.Source(kind="memory-bank"),
                tags=(LIFECYCLE_TAG,),
                file_paths=(f"memory-bank/{item.file}",),
            )
            for item in found
        ]
        imported = project.import_entries(candidates)
        decisions = sum(1 for e in imported if e.category == "decision")
        return p.IngestResult(
            decisions=decisions,
            completed=len(imported) - decisions,
            duplicates=len(candidates) - len(imported),
        )

    # -- sync ----------------------------------------------------------------------------------

    def sync_due(self) -> None:
        """The periodic sync: every file with pending changes goes to the writer."""
        self.cache.sync()
        self.cache.dump()

    def written(self, results: Iterable[FlushResult]) -> None:
        """The writer's reports, collected on the owner thread; each file settled goes to its
        project's audit log (every change the daemon makes to a user's files is there)."""
        for synced in self.cache.collect(results):
            event = BankFileSynced(
                file=f"{BANK_DIRNAME}/{synced.name}",
                applied=tuple(synced.applied),
                left_out=tuple(synced.left_out),
                written=synced.written,
                sha=synced.sha,
                synced_at=self._clock(),
            )
            try:
                self._registry.get(str(synced.root)).commit(event)
            except (MemorydError, OSError) as exc:  # the file is written; only the record failed
                self.cache.report(f"memory bank {synced.name} in {synced.root}: not audited: {exc}")
        self.cache.dump()

    def check_journal(self, root: Path, *, repair: bool) -> tuple[str, bool]:
        """The bank journal against the cache for ``root``'s bank (``BankCache.check_journal``)."""
        return self.cache.check_journal(root, repair=repair)

    def sync_now(self, request_id: str, cwd: str | None) -> Path:
        """Hand this project's pending changes to the writer now, once per request however
        often a parked request is run again; the project root, to wait on with
        ``cache.busy``."""
        root = self._registry.get(cwd).root
        if not request_id:  # a counter, not unique: cannot tell a re-run from a new request
            self.cache.sync(root)
        elif request_id not in self._sync_requests:
            self._sync_requests[request_id] = None
            while len(self._sync_requests) > 64:
                self._sync_requests.popitem(last=False)
            self.cache.sync(root)
        return root

    def sync_state(self, root: Path) -> p.BankSyncResult:
        return p.BankSyncResult(pending=self.cache.pending(root), writing=self.cache.busy(root))

    # -- projects -----------------------------------------------------------------------------

    def projects(self) -> p.ProjectsResult:
        seen: dict[str, p.KnownProject] = {}
        for root in self._registry.known():  # open now or not
            seen[str(root)] = p.KnownProject(name=root.name, path=str(root))
        for name, directory in find_banks(self._bank_roots):
            seen.setdefault(str(directory), p.KnownProject(name=name, path=str(directory)))
        return p.ProjectsResult(projects=sorted(seen.values(), key=lambda k: k.path))

    # -- instruction files --------------------------------------------------------------------

    def _files(self, cwd: str | None) -> InstructionFiles:
        root = self._registry.get(cwd).root
        files = self._instructions.get(root)
        if files is None:
            files = self._instructions[root] = InstructionFiles(root, self._instruction_config)
            self._watch_instructions(root, files)
        return files

    def is_instruction_file(self, path: str) -> bool:
        """Whether ``path`` is (or may become) an instruction file of a loaded project. Safe to
        call from any thread."""
        return path in self._instruction_paths

    def instruction_file_changed(self, path: str) -> None:
        """An instruction file changed on disk: load its projects' files again (and watch what
        they import now)."""
        for root in self._instruction_paths.get(path, frozenset()):
            files = self._instructions.get(root)
            if files is not None:
                files.refresh()
                self._watch_instructions(root, files)

    def _watch_instructions(self, root: Path, files: InstructionFiles) -> None:
        paths = {str(p) for p in files.watched()}
        updated = {k: v - {root} for k, v in self._instruction_paths.items()}
        for path in paths:
            updated[path] = updated.get(path, frozenset()) | {root}
        self._instruction_paths = {k: v for k, v in updated.items() if v}
        if self.on_instructions_loaded is not None:
            self.on_instructions_loaded({Path(p).parent for p in paths})

    def instruction_segments(self, cwd: str | None) -> list[Segment]:
        """The project's instruction files with their imports, weakest first, read again: a
        session must start with the files as they are now (a few small reads, once a session)."""
        return self._files(cwd).refresh().segments

    def bank_texts(self, cwd: str | None) -> dict[str, str | None]:
        """The bank's files as the cache has them (the seven, None when missing)."""
        return self.cache.contents(self._registry.get(cwd).root)[0]

    def files_list(self, cwd: str | None, *, refresh: bool = False) -> p.FilesListResult:
        files = self._files(cwd)
        if refresh:
            files.refresh()
            self._watch_instructions(files.project_root, files)
        return msgspec.convert(files.files_list(), p.FilesListResult)

    def files_show(self, cwd: str | None) -> p.FilesShowResult:
        return msgspec.convert(self._files(cwd).files_show(), p.FilesShowResult)

    def save_memory(self, req: p.SaveMemory) -> p.SaveMemoryResult:
        # MEMORY.md is meant to be committed: what an agent or a user saves there is redacted,
        # and the diff shown is the text that would be written.
        saved = self._files(req.project).save_memory(
            redact(req.content).text, req.section, req.target, confirm=req.confirm
        )
        return _convert(saved, p.SaveMemoryResult)


def _convert(value: object, kind: type[_T]) -> _T:
    return msgspec.convert(msgspec.to_builtins(value), kind)


def _route_in_time(text: str, llm: LlmProcessor, now: datetime, start_by: float) -> ProcessResult:
    """On the LLM worker: the LLM's routing, or the rules' when the request waited in the queue
    so long that the LLM could not answer in time (one worker; the endpoint is slow)."""
    if time.monotonic() > start_by:
        reason = f"timeout: the LLM was busy with other requests for over {llm.timeout_s:g} s"
        return ProcessResult(route(text, now), "rules", reason)
    return process_content(text, llm, now)
