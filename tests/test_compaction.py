"""Compaction on the real daemon (SPEC §8, issue 9 acceptance 1): backdated imports expire by
their category's TTL, the soft limit evicts down to the target, and everything removed is in
the archive and the audit log."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Env, memctl, ok_json, until
from memctl import protocol as p
from memoryd.background import BackgroundErrors
from memoryd.compactor import ACCESS_RUN_SHARE, EVERY_ACCESSES, Compactor
from memoryd.config import StorageSettings
from memoryd.core.compaction import DEFAULT_POLICY, CompactionPlan, plan_compaction
from memoryd.core.recall.retrieval import RetrievalConfig
from memoryd.core.recall.slo import SloMonitor
from memoryd.project import ProjectMemory
from memoryd.recall import Recall

DAY = 86_400.0


def _import(env: Env, lines: list[dict]) -> dict:
    result = ok_json(env, "import", "-", stdin="".join(json.dumps(x) + "\n" for x in lines))
    assert result["imported"] == len(lines), result
    return result


def _ids_by_content(env: Env, archived: bool = False) -> dict[str, dict]:
    args = ["list", "--limit", "10000"] + (["--archived"] if archived else [])
    return {e["content"]: e for e in ok_json(env, *args)["entries"]}


def _compaction_decisions(env: Env) -> dict[str, dict]:
    out = memctl(env, "audit", "-n", "5000")
    assert out.code == 0, out.stderr
    decisions: dict[str, dict] = {}
    for line in out.stdout.splitlines():
        record = json.loads(line)
        event = record.get("event", record)
        if event.get("type") == "compaction_applied":
            decisions.update((d["id"], d) for d in event["decisions"])
    return decisions


def test_backdated_entries_expire_by_ttl_unless_used_or_pinned(env: Env, daemon) -> None:
    ok_json(env, "status")  # the project opens and its on-load run (of nothing) is over
    now = time.time()
    lines = [
        {"content": "old progress: wired the parser", "category": "task_progress",
         "created_at": now - 200 * DAY},
        {"content": "old progress but used often", "category": "task_progress",
         "created_at": now - 200 * DAY, "last_accessed_at": now - 100 * DAY, "access_count": 3},
        {"content": "old progress that is pinned", "category": "task_progress",
         "created_at": now - 200 * DAY},
        {"content": "a warning past its thirty days", "category": "warning",
         "created_at": now - 40 * DAY},
        {"content": "a warning used recently", "category": "warning",
         "created_at": now - 40 * DAY, "last_accessed_at": now - 2 * DAY, "access_count": 1},
        {"content": "a decision within ninety days", "category": "decision",
         "created_at": now - 60 * DAY},
    ]  # fmt: skip
    _import(env, lines)
    active = _ids_by_content(env)
    assert active["old progress but used often"]["access_count"] == 3
    assert active["a warning used recently"]["last_accessed_at"] < now
    ok_json(env, "pin", active["old progress that is pinned"]["id"])

    preview = ok_json(env, "compact", "--dry-run")
    assert (preview["expired"], preview["dry_run"]) == (2, True)
    assert len(_ids_by_content(env)) == 6  # a dry run changes nothing

    result = ok_json(env, "compact")
    assert {k: result[k] for k in ("expired", "evicted", "purged", "active", "archived")} == {
        "expired": 2, "evicted": 0, "purged": 0, "active": 4, "archived": 2,
    }  # fmt: skip
    expired = {"old progress: wired the parser", "a warning past its thirty days"}
    assert set(_ids_by_content(env)) == {x["content"] for x in lines} - expired
    archived = _ids_by_content(env, archived=True)
    assert set(archived) == expired
    assert {e["archived_reason"] for e in archived.values()} == {"stale"}
    found = ok_json(env, "search", "parser progress", "--archive")["results"]
    assert archived["old progress: wired the parser"]["id"] in [r["id"] for r in found]
    assert not any(
        r["id"] == archived["old progress: wired the parser"]["id"]
        for r in ok_json(env, "search", "parser progress")["results"]
    )
    decisions = _compaction_decisions(env)
    for entry in archived.values():
        decision = decisions[entry["id"]]
        assert decision["type"] == "entry_expired" and decision["days_since_access"] > 30
    assert ok_json(env, "status")["project"]["last_compacted_at"] >= now
    again = ok_json(env, "compact")
    assert (again["expired"], again["active"], again["archived"]) == (0, 4, 2)


def test_a_run_waiting_on_the_index_is_woken_by_its_commit(env: Env) -> None:
    """A run waits for the index's commits in the background (at its end: the archive is
    searchable when ``compact`` answers); each commit wakes the loop. With no other message to
    wake it (the index commit job never ticks here, the client does not retry), ``compact``
    would otherwise be answered at its deadline, unfinished (fails so without the wake)."""
    from conftest import Daemon

    daemon = Daemon(env, {"MEMORYD_JOBS__INDEX_COMMIT_S": "3600"}).start()
    try:
        now = time.time()
        _import(
            env,
            [
                {"content": f"wired the lexer stage {i}", "category": "task_progress",
                 "created_at": now - 200 * DAY}
                for i in range(20)
            ],
        )  # fmt: skip
        # A budget past the daemon's own deadline for compact: no retry of the client's wakes
        # the loop either.
        result = ok_json(env, "--timeout", "60", "compact")
        assert result["done"] and result["expired"] == 20, result
        found = ok_json(env, "search", "lexer stage", "--archive", "-k", "30")["results"]
        assert len(found) == 20
    finally:
        daemon.stop()


@pytest.fixture
def planned(tmp_path: Path) -> Iterator[tuple[ProjectMemory, Recall, CompactionPlan, str]]:
    """In process: a project whose five task_progress entries a run 200 days on expires, the
    plan of that run (not applied), and the id of an entry it keeps."""
    root = tmp_path / "repo"
    root.mkdir()
    project = ProjectMemory(root, tmp_path / "data", StorageSettings(), BackgroundErrors())
    try:
        for i in range(5):
            project.remember(
                p.Remember(content=f"wired the parser lexer stage {i}", category="task_progress")
            )
        kept = project.remember(
            p.Remember(content="the parser reads the lexer table", category="preference")
        ).id
        recall = Recall(RetrievalConfig(), SloMonitor())
        assert len(recall.search(project, p.Search(query="parser lexer", k=10))) == 6
        plan = plan_compaction(project.entries_after("", 100), time.time() + 200 * DAY)
        assert len(plan.expired) == 5
        yield project, recall, plan, kept
    finally:
        project.close()


class _Ticks:
    """A monotonic clock the test moves: a millisecond a reading, or set."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def test_a_run_the_accesses_ask_for_waits_out_fifty_times_the_last_ones_work(
    tmp_path: Path,
) -> None:
    # Design §8: a run after every 50 injected entries. Under 8 clients that was a run every
    # 10 injects (a third of the owner thread, the result cache voided by each): such a run now
    # waits until the project's last one has been over for ACCESS_RUN_SHARE times its work.
    root = tmp_path / "repo"
    root.mkdir()
    project = ProjectMemory(root, tmp_path / "data", StorageSettings(), BackgroundErrors())
    ticks = _Ticks()
    compactor = Compactor(lambda: [project], monotonic=ticks)
    try:
        project.remember(p.Remember(content="the parser reads the lexer table"))
        run = compactor.request(project)
        deadline = time.monotonic() + 30
        while not run.done() and time.monotonic() < deadline:  # its commits end on their thread
            compactor.step()
        assert run.done() and run.ended_at is not None and run.worked_s > 0
        project.accesses_since_compaction = EVERY_ACCESSES - 1
        compactor.step()
        assert not compactor.pending()  # too few accesses
        project.accesses_since_compaction = EVERY_ACCESSES
        compactor.step()
        assert not compactor.pending()  # the last run's share of time not waited out yet
        assert project.accesses_since_compaction == EVERY_ACCESSES
        ticks.now = run.ended_at + run.worked_s * ACCESS_RUN_SHARE
        compactor.step()  # queued, and its first step begins by counting accesses afresh
        assert compactor.pending() and project.accesses_since_compaction == 0
    finally:
        project.close()


def _apply(project: ProjectMemory, plan: CompactionPlan) -> list[str]:
    ran_at = plan.expired[0].archived_at
    applied = project.apply_compaction(
        plan.expired, ran_at=ran_at, completed=True, policy=DEFAULT_POLICY
    )
    return [d.id for d in applied]


def test_an_archive_the_index_has_not_learned_of_is_never_served(planned) -> None:
    """Read-your-writes while the index lags (``project.INDEX_MAY_LAG``): compaction's batches
    reach the index by commits in the background, so for a moment the index holds an archived
    entry as active. In process, to hold that moment still (at the daemon it lasts a commit)."""
    project, recall, plan, kept = planned
    stale = _apply(project, plan)
    assert len(stale) == 5 and project.index_lags  # the index was told nothing...
    hits = project.search_candidates(
        {"parser": 1.0, "lexer": 1.0},
        scope="active",
        active_files=(),
        config=RetrievalConfig(),
        scan=20,
    )
    assert set(stale) <= set(hits.ids([c.ref for c in hits.candidates]))  # ...holds them active
    # Nothing archived comes out of a search or a payload.
    search = p.Search(query="parser lexer", k=10)
    assert [r.id for r in recall.search(project, search)] == [kept]
    injected = recall.inject(project, p.Inject(query="parser lexer stage")).entries
    assert kept in injected and not set(stale) & set(injected)
    # The archive cannot make up for what the index lacks: it waits for the index.
    archived = recall.search(project, p.Search(query="parser lexer", k=10, archive=True))
    assert sorted(r.id for r in archived) == sorted(stale) and not project.index_lags


def test_an_entry_injected_while_the_run_plans_is_not_archived(planned) -> None:
    project, _recall, plan, _kept = planned
    used = plan.expired[2].id
    project.record_access([used], time.time())  # as an inject does: held, not flushed yet
    applied = _apply(project, plan)
    assert len(applied) == 4 and used not in applied
    assert not project.entries([used])[used].archived


def test_past_the_soft_limit_active_memory_is_evicted_to_the_target(env: Env, daemon) -> None:
    ok_json(env, "status")
    now = time.time()
    lines = [
        {
            "content": f"fact number {i} about module m{i} and its helper h{i}",
            "category": "preference",  # a long TTL: only eviction removes these
            "created_at": now - 3 * DAY,
            "importance": round(0.2 + (i % 70) / 100, 2),
        }
        for i in range(3_500)
    ]
    _import(env, lines)
    result = ok_json(env, "compact")
    assert (result["evicted"], result["active"], result["archived"]) == (800, 2_700, 800)
    archived = _ids_by_content(env, archived=True)
    assert len(archived) == 800 and {e["archived_reason"] for e in archived.values()} == {"evicted"}
    kept = _ids_by_content(env)
    assert len(kept) == 2_700
    assert max(e["importance"] for e in archived.values()) <= min(
        e["importance"] for e in kept.values()
    )  # the least important went
    decisions = _compaction_decisions(env)
    assert {e["id"] for e in archived.values()} <= set(decisions)
    sample = sorted(archived)[:3]
    for content in sample:
        hits = ok_json(env, "search", content, "--archive", "-k", "3")["results"]
        assert archived[content]["id"] in [h["id"] for h in hits]


def _journal(env: Env, slug: str) -> list[dict]:
    """The journaled events. A kill in the middle of a write leaves its last line torn: the
    daemon cuts it when it opens the journal (that event was never applied), and so does this."""
    path = env.data / "projects" / slug / "audit.jsonl"
    data = path.read_bytes()
    lines = data.splitlines()
    if lines and not data.endswith(b"\n"):
        lines.pop()
    return [json.loads(line) for line in lines]


def _journaled_archives(records: list[dict]) -> tuple[set[str], list[bool]]:
    """Ids archived by journaled compaction batches, and each batch's ``completed``."""
    ids: set[str] = set()
    completed: list[bool] = []
    for record in records:
        event = record["event"]
        if event["type"] == "compaction_applied":
            completed.append(event.get("completed", False))
            ids.update(
                d["id"]
                for d in event["decisions"]
                if d["type"] in ("entry_expired", "entry_evicted")
            )
    return ids, completed


def test_sigkill_during_compaction_loses_nothing_and_half_applies_nothing(env: Env) -> None:
    import subprocess

    from conftest import BIN, Daemon
    from test_durability import assert_clean_on_disk

    daemon = Daemon(env).start()
    now = time.time()
    total = 6_000  # 3,300 evictions and as many decays: a run of several batches
    lines = [
        {
            "content": f"kept fact {i} about service s{i} and queue q{i}",
            "category": "preference",
            "created_at": now - 3 * DAY,
            "importance": round(0.2 + (i % 70) / 100, 2),
        }
        for i in range(total)
    ]
    _import(env, lines)
    acked = ok_json(env, "remember", "Acknowledged before the crash: keep it")["id"]
    slug = ok_json(env, "status")["project"]["slug"]
    audit = env.data / "projects" / slug / "audit.jsonl"
    seen = audit.stat().st_size
    compact = subprocess.Popen(
        [str(BIN / "memctl"), "--json", "compact"],
        cwd=env.project,
        env=env.environ(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with open(audit, "rb") as fh:

            def first_batch_journaled() -> bool:
                # A whole line: a batch's line is long and lands in pieces, and a kill
                # between them leaves it torn, never applied (CI once killed there).
                fh.seek(seen)
                data = fh.read()
                at = data.find(b'"compaction_applied"')
                return at >= 0 and b"\n" in data[at:]

            until(first_batch_journaled, "the first compaction batch journaled", 60)
        daemon.kill()  # SIGKILL, mid-run
    finally:
        # Its daemon is gone: the client would only wait out its 30 s budget.
        compact.kill()
        compact.wait(timeout=60)
    archived_at_kill, completed = _journaled_archives(_journal(env, slug))
    assert completed and not completed[-1], "the kill should land before the run's last batch"
    print(f"\nkilled after {len(completed)} batches, {len(archived_at_kill)} entries archived")

    daemon = Daemon(env).start()
    # Reopened with entries: the on-load run, joined by this request, finishes the job.
    result = ok_json(env, "compact")
    assert (result["active"], result["archived"]) == (2_700, total + 1 - 2_700)
    exported = memctl(env, "export", "--archived").stdout.splitlines()
    entries = {e["id"]: e for e in map(json.loads, exported)}
    assert acked in entries and not entries[acked]["archived"]
    assert len(entries) == total + 1  # nothing lost: compaction archives, never deletes
    archived = {i for i, e in entries.items() if e["archived"]}
    journaled, _ = _journaled_archives(_journal(env, slug))
    # Whole batches only: every journaled decision applied, nothing applied unjournaled.
    assert archived == journaled and archived_at_kill <= archived
    assert_clean_on_disk(env, daemon, slug, total + 1)


def test_compaction_runs_on_load_and_after_accesses(env: Env) -> None:
    from conftest import Daemon

    daemon = Daemon(env).start()
    now = time.time()
    _import(
        env,
        [
            {"content": f"stale progress {i}", "category": "task_progress",
             "created_at": now - 30 * DAY}
            for i in range(3)
        ],
    )  # fmt: skip
    daemon.stop()
    daemon = Daemon(env).start()
    try:
        # The project opens with the first request; its on-load run archives what went stale.
        ok_json(env, "status")
        until(
            lambda: ok_json(env, "status")["project"]["entries"]["archived"] == 3,
            "the on-load compaction",
        )
        assert ok_json(env, "status")["project"]["last_compacted_at"] >= now
        fresh = ok_json(env, "remember", "the build uses bazel and remote caching")["id"]
        _import(
            env,
            [{"content": "old progress nobody reads", "category": "task_progress",
              "created_at": now - 30 * DAY}],
        )  # fmt: skip
        for _ in range(50):  # 50 injected entries start a run
            assert fresh[:8] in ok_json(env, "inject", "--query", "bazel build caching")["text"]
        until(
            lambda: ok_json(env, "status")["project"]["entries"]["archived"] == 4,
            "a run after 50 accesses",
        )
    finally:
        daemon.stop()
