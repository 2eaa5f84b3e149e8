"""Unit tests of the compaction core (SPEC §8, seed 004 §16): the decay formula, pinned entries,
TTL per category and its access exception, eviction from 3,500 to 2,700 by decayed importance,
the 24 h protection, the archive purge, idempotence over repeated runs, and slicing."""

from __future__ import annotations

import math
import random
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memctl.protocol import Category, Entry
from memoryd.core.compaction import (
    DEFAULT_POLICY,
    CompactionPlan,
    CompactionPlanner,
    CompactionPolicy,
    compaction_steps,
    decayed_importance,
    plan_compaction,
    planning_steps,
    still_holds,
)
from memoryd.core.entries import CATEGORIES, CATEGORY_TABLE
from memoryd.core.events import CompactionEvent, EntryExpired

DAY = 86_400.0
NOW = 1_750_000_000.0


def entry(i: int | str = 0, *, days: float = 0.0, **kw: Any) -> Entry:
    """An entry last accessed ``days`` ago (created then, never accessed, unless told)."""
    defaults: dict[str, Any] = dict(
        id=f"e{i}",
        fingerprint=f"fp{i}",
        content=f"entry {i}",
        category="preference",
        section="Patterns & Conventions",
        importance=0.7,
        confidence=1.0,
        status="confirmed",
        created_at=NOW - days * DAY,
        updated_at=NOW - days * DAY,
    )
    return Entry(**(defaults | kw))


def ids(decisions: tuple[Any, ...]) -> set[str]:
    return {d.id for d in decisions}


def last_plan(steps: Any) -> CompactionPlan:
    *rest, plan = list(steps)
    assert all(step is None for step in rest)
    assert isinstance(plan, CompactionPlan)
    return plan


# --------------------------------------------------------------------------- decay


def test_decay_formula_numbers() -> None:
    accessed = entry(importance=0.8, access_count=4, last_accessed_at=NOW - 14 * DAY)
    # 0.8 × 0.95^(14/7) × 1.0 (confirmed) × min(1, 0.5 + 4 × 0.05)
    assert decayed_importance(accessed, NOW) == pytest.approx(0.8 * 0.95**2 * 0.7, abs=1e-6)

    candidate = entry(importance=0.8, status="candidate", access_count=4, days=14)
    assert decayed_importance(candidate, NOW) == pytest.approx(0.8 * 0.95**2 * 0.9 * 0.7, abs=1e-6)

    # Access resistance reaches 1 at 10 accesses and stays there.
    for n in (10, 40):
        e = entry(importance=0.5, access_count=n, last_accessed_at=NOW - 3.5 * DAY)
        assert decayed_importance(e, NOW) == pytest.approx(0.5 * 0.95**0.5, abs=1e-6)

    fresh = entry(importance=0.6)  # just created, never accessed: only the resistance floor
    assert decayed_importance(fresh, NOW) == pytest.approx(0.3)


def test_never_accessed_decays_from_created_at_not_updated_at() -> None:
    # A status change or a quarantine penalty moves updated_at; it is not a use.
    e = entry(importance=1.0, access_count=10, days=7, updated_at=NOW - 60)
    assert decayed_importance(e, NOW) == pytest.approx(0.95, abs=1e-6)
    accessed = msgspec.structs.replace(e, last_accessed_at=NOW)
    assert decayed_importance(accessed, NOW) == pytest.approx(1.0)


def test_first_run_reports_decay_with_its_numbers() -> None:
    e = entry("d", importance=0.8, access_count=4, last_accessed_at=NOW - 14 * DAY, days=20)
    plan = plan_compaction([e], NOW)
    (d,) = plan.decayed
    assert (d.id, d.importance, d.decayed_from) == ("e" + "d", 0.8, 0.8)
    assert d.decayed == pytest.approx(0.8 * 0.95**2 * 0.7, abs=1e-6)
    assert (d.days_since_access, d.status_multiplier, d.access_resistance) == (14.0, 1.0, 0.7)
    assert d.decayed_at == NOW
    assert plan.counts.decayed == 1


def test_pinned_entries_never_decay_expire_or_get_evicted() -> None:
    policy = CompactionPolicy(soft_limit=3, target=2)
    pinned = [
        entry(i, status="pinned", category="task_progress", importance=0.01, days=400)
        for i in range(5)
    ]
    plan = plan_compaction(pinned, NOW, policy)
    assert plan.decayed == plan.expired == plan.evicted == ()
    assert plan.counts.active == 5
    assert decayed_importance(pinned[0], NOW) == 0.01


# --------------------------------------------------------------------------- TTL


def test_ttl_defaults_are_the_spec_table() -> None:
    assert dict(DEFAULT_POLICY.ttl_days) == {c: ttl for c, (ttl, _) in CATEGORY_TABLE.items()}
    assert DEFAULT_POLICY.ttl_days["task_progress"] == 14
    assert DEFAULT_POLICY.ttl_days["preference"] == 365
    assert set(DEFAULT_POLICY.ttl_days) == set(CATEGORIES)


@pytest.mark.parametrize("category", CATEGORIES)
def test_ttl_per_category(category: Category) -> None:
    ttl = DEFAULT_POLICY.ttl_days[category]
    old = entry("old", category=category, days=ttl + 0.5)
    young = entry("young", category=category, days=ttl - 0.5)
    plan = plan_compaction([old, young], NOW)
    assert plan.expired == (
        EntryExpired(
            id="eold",
            category=category,
            ttl_days=ttl,
            days_since_access=ttl + 0.5,
            access_count=0,
            archived_at=NOW,
        ),
    )
    assert (plan.counts.expired, plan.counts.active, plan.counts.archived) == (1, 1, 1)


def test_accessed_three_times_survives_ttl_twice_does_not() -> None:
    last = NOW - 100 * DAY
    often = entry(
        "often", category="task_progress", access_count=3, days=200, last_accessed_at=last
    )
    twice = entry(
        "twice", category="task_progress", access_count=2, days=200, last_accessed_at=last
    )
    plan = plan_compaction([often, twice], NOW)
    assert ids(plan.expired) == {"etwice"}


def test_ttl_counts_from_last_access() -> None:
    used = entry("used", category="task_progress", days=200, last_accessed_at=NOW - 3 * DAY)
    plan = plan_compaction([used], NOW)
    assert plan.expired == ()


def test_an_expired_entry_is_not_also_reported_decayed() -> None:
    plan = plan_compaction([entry(category="task_progress", days=30)], NOW)
    assert ids(plan.expired) == {"e0"} and plan.decayed == ()


# --------------------------------------------------------------------------- eviction


def population(n: int, *, days: float = 30.0, seed: int = 1) -> list[Entry]:
    rng = random.Random(seed)
    importances = rng.sample(range(1, 1_000_000), n)  # distinct, so the order is unambiguous
    return [entry(i, importance=v / 1_000_000, days=days) for i, v in enumerate(importances)]


def test_3500_active_are_evicted_to_2700_by_importance() -> None:
    entries = population(3_500)
    plan = plan_compaction(entries, NOW)
    assert plan.counts.evicted == 800
    assert (plan.counts.active, plan.counts.archived) == (2_700, 800)
    by_importance = sorted(entries, key=lambda e: e.importance)
    assert ids(plan.evicted) == {e.id for e in by_importance[:800]}
    kept_lowest = decayed_importance(by_importance[800], NOW)
    for ev in plan.evicted:
        assert ev.decayed < kept_lowest
        assert ev.cutoff == kept_lowest
        assert (ev.active_before, ev.soft_limit, ev.target, ev.archived_at) == (
            3_500,
            3_000,
            2_700,
            NOW,
        )


def test_at_the_soft_limit_nothing_is_evicted() -> None:
    plan = plan_compaction(population(3_000), NOW)
    assert plan.evicted == () and plan.counts.active == 3_000


def test_expiry_counts_before_the_soft_limit() -> None:
    stale = [entry(f"s{i}", category="task_progress", days=20) for i in range(600)]
    plan = plan_compaction(population(2_900) + stale, NOW)
    assert (plan.counts.expired, plan.counts.evicted, plan.counts.active) == (600, 0, 2_900)


def test_eviction_ranks_by_decayed_not_stored_importance() -> None:
    policy = CompactionPolicy(soft_limit=2, target=1)
    unused = entry("unused", importance=0.9, days=30)  # resistance 0.5
    used = entry("used", importance=0.6, access_count=10, days=60, last_accessed_at=NOW - 30 * DAY)
    filler = entry("filler", importance=0.01, days=30)
    plan = plan_compaction([unused, used, filler], NOW, policy)
    assert ids(plan.evicted) == {"eunused", "efiller"}


def test_recently_accessed_and_pinned_are_never_evicted() -> None:
    recent = [
        entry(f"r{i}", importance=0.001, days=90, last_accessed_at=NOW - 23 * 3600)
        for i in range(1_000)
    ]
    pinned = [entry(f"p{i}", importance=0.001, status="pinned", days=90) for i in range(500)]
    just_made = [entry(f"n{i}", importance=0.001, days=0.5) for i in range(100)]
    plan = plan_compaction(population(2_000) + recent + pinned + just_made, NOW)
    assert not ids(plan.evicted) & {e.id for e in recent + pinned + just_made}
    assert plan.counts.evicted == 900 and plan.counts.active == 2_700


def test_when_protected_entries_exceed_the_target_every_other_one_goes() -> None:
    recent = [entry(f"r{i}", days=5, last_accessed_at=NOW - 3600) for i in range(2_800)]
    plan = plan_compaction(population(300) + recent, NOW)
    assert plan.counts.evicted == 300
    assert plan.counts.active == 2_800  # above the target: nothing else may go
    assert all(ev.cutoff is None for ev in plan.evicted)


# --------------------------------------------------------------------------- purge


def test_archived_entries_older_than_archive_days_are_purged() -> None:
    old = entry("old", archived=True, archived_reason="evicted", days=366)
    young = entry("young", archived=True, archived_reason="stale", days=364)
    plan = plan_compaction([old, young, entry("active", days=1)], NOW)
    (purged,) = plan.purged
    assert (purged.id, purged.archived_reason, purged.archive_days) == ("eold", "evicted", 365)
    assert (purged.archived_at, purged.days_archived, purged.purged_at) == (
        NOW - 366 * DAY,
        366.0,
        NOW,
    )
    assert (plan.counts.purged, plan.counts.archived, plan.counts.active) == (1, 1, 1)


def test_archived_entries_neither_decay_expire_nor_count_as_active() -> None:
    archived = [
        entry(i, archived=True, archived_reason="user", category="task_progress", days=40)
        for i in range(3_500)
    ]
    plan = plan_compaction(archived, NOW)
    assert plan.decayed == plan.expired == plan.evicted == plan.purged == ()
    assert (plan.counts.active, plan.counts.archived) == (0, 3_500)


# --------------------------------------------------------------------------- idempotence


def apply(entries: list[Entry], plan: CompactionPlan) -> list[Entry]:
    """What the service will do with a plan: archive expired and evicted, delete purged."""
    reasons = {d.id: "stale" for d in plan.expired} | {d.id: "evicted" for d in plan.evicted}
    gone = ids(plan.purged)
    return [
        msgspec.structs.replace(
            e, archived=True, archived_reason=reasons[e.id], updated_at=plan.now
        )
        if e.id in reasons
        else e
        for e in entries
        if e.id not in gone
    ]


def mixed(n: int, seed: int) -> list[Entry]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        days = rng.uniform(0, 500)
        accessed = rng.random() < 0.5
        out.append(
            entry(
                i,
                importance=round(rng.uniform(0.05, 1.0), 4),
                category=rng.choice(CATEGORIES),
                status=rng.choice(("candidate", "confirmed", "confirmed", "pinned")),
                access_count=rng.randrange(0, 12) if accessed else 0,
                last_accessed_at=NOW - rng.uniform(0, days) * DAY if accessed else None,
                archived=rng.random() < 0.1,
                archived_reason="user",
                days=days,
            )
        )
    return out


def test_a_run_a_minute_after_another_changes_nothing() -> None:
    policy = CompactionPolicy(soft_limit=300, target=250)
    entries = mixed(1_000, seed=3)
    first = plan_compaction(entries, NOW, policy)
    assert first.counts.decayed and first.counts.expired and first.counts.evicted
    after = apply(entries, first)
    second = plan_compaction(after, NOW + 60, policy, since=NOW)
    assert second.decayed == second.expired == second.evicted == second.purged == ()
    assert (second.counts.active, second.counts.archived) == (
        first.counts.active,
        first.counts.archived,
    )


def test_the_same_run_twice_gives_the_same_plan() -> None:
    entries = mixed(500, seed=4)
    assert plan_compaction(entries, NOW, since=NOW - DAY) == plan_compaction(
        entries, NOW, since=NOW - DAY
    )


def test_decay_over_runs_never_compounds_the_static_factors() -> None:
    # A candidate never accessed: status 0.9 and resistance 0.5 are applied once, however many
    # runs happen; a week between two runs costs exactly one week's 5%.
    e = entry(importance=0.8, status="candidate", days=7)
    week_ago = decayed_importance(e, NOW)
    for minutes in range(0, 7 * 24 * 60, 97):  # many runs over the next week
        plan_compaction([e], NOW + minutes * 60, since=NOW + (minutes - 97) * 60)
    a_week_later = decayed_importance(e, NOW + 7 * DAY)
    assert a_week_later == pytest.approx(week_ago * 0.95, abs=1e-6)
    assert week_ago == pytest.approx(0.8 * 0.95 * 0.9 * 0.5, abs=1e-6)


def test_a_weekly_run_reports_the_week_decay() -> None:
    e = entry(importance=1.0, access_count=10, days=7)
    (d,) = plan_compaction([e], NOW + 7 * DAY, since=NOW).decayed
    assert d.decayed_from == pytest.approx(0.95, abs=1e-6)
    assert d.decayed == pytest.approx(0.95**2, abs=1e-6)


# --------------------------------------------------------------------------- slices


@pytest.mark.parametrize("slice_size", [1, 7, 333, 100_000])
def test_slices_give_the_same_plan_as_one_pass(slice_size: int) -> None:
    policy = CompactionPolicy(soft_limit=1_500, target=1_200)
    entries = mixed(3_000, seed=5)
    whole = plan_compaction(entries, NOW, policy, since=NOW - 3 * DAY)
    assert whole.counts.evicted  # the eviction phase is exercised
    sliced = last_plan(
        compaction_steps(entries, NOW, policy, since=NOW - 3 * DAY, slice_size=slice_size)
    )
    assert sliced == whole


def test_the_decisions_a_run_applies_are_the_plan_in_order() -> None:
    """What the daemon's run applies, built one at a time from the planner's columns, is the
    plan: expired, evicted, purged, decayed (a purge too: some entries archived long ago)."""
    policy = CompactionPolicy(soft_limit=1_500, target=1_200)
    entries = mixed(3_000, seed=5)
    entries += [
        entry(f"a{i}", days=400 + i, archived=True, archived_reason="stale") for i in range(3)
    ]
    whole = plan_compaction(entries, NOW, policy, since=NOW - 3 * DAY)
    assert all((whole.counts.expired, whole.counts.evicted, whole.counts.purged))
    *rest, planner = planning_steps(entries, NOW, policy, since=NOW - 3 * DAY, slice_size=333)
    assert all(step is None for step in rest) and isinstance(planner, CompactionPlanner)
    assert planner.counts() == whole.counts
    applied = list(planner.decisions())
    assert applied == [*whole.expired, *whole.evicted, *whole.purged, *whole.decayed]


def test_planner_accepts_uneven_chunks_and_evicts_a_slice_at_a_time() -> None:
    policy = CompactionPolicy(soft_limit=1_500, target=1_200)
    entries = mixed(3_000, seed=6)
    planner = CompactionPlanner(NOW, policy)
    start = 0
    for size in (1, 999, 0, 1_500, 500):
        planner.add(entries[start : start + size])
        start += size
    steps = 1
    while not planner.evict(100):
        steps += 1
    assert steps > 5
    with pytest.raises(RuntimeError):
        planner.add(entries[:1])
    assert planner.plan() == plan_compaction(entries, NOW, policy)


def test_steps_are_bounded_by_the_slice_size() -> None:
    entries = population(3_500)
    steps = list(compaction_steps(entries, NOW, slice_size=500))
    # 7 slices of entries, then evictions over the 3,500 evictable in slices of 500, the last
    # of them taken with the plan.
    assert len(steps) == 7 + 6 + 1


# --------------------------------------------------------------------------- values


def test_counts_are_what_memctl_compact_reports() -> None:
    counts = plan_compaction(mixed(100, seed=7), NOW).counts
    assert set(msgspec.structs.asdict(counts)) == {
        "decayed",
        "expired",
        "evicted",
        "purged",
        "active",
        "archived",
    }


def test_decisions_are_tagged_events_that_round_trip() -> None:
    plan = plan_compaction(mixed(2_000, seed=8), NOW, CompactionPolicy(soft_limit=500, target=400))
    decisions = plan.decayed + plan.expired + plan.evicted + plan.purged
    assert {type(d).__name__ for d in decisions} == {
        "EntryDecayed",
        "EntryExpired",
        "EntryEvicted",
        "ArchivePurged",
    }
    raw = msgspec.json.encode(decisions)
    assert msgspec.json.decode(raw, type=tuple[CompactionEvent, ...]) == decisions
    assert b'"type":"entry_expired"' in raw


def test_policy_rejects_a_target_above_the_soft_limit() -> None:
    with pytest.raises(ValueError):
        CompactionPolicy(soft_limit=100, target=200)


# --------------------------------------------------------------------------- property

SMALL = CompactionPolicy(soft_limit=12, target=8)


@st.composite
def entries_strategy(draw: st.DrawFn) -> list[Entry]:
    n = draw(st.integers(0, 40))
    out = []
    for i in range(n):
        days = draw(st.floats(0, 800))
        accessed_days = draw(st.none() | st.floats(0, 800))
        out.append(
            entry(
                i,
                days=days,
                importance=draw(st.floats(0, 1)),
                status=draw(st.sampled_from(("candidate", "confirmed", "pinned"))),
                category=draw(st.sampled_from(CATEGORIES)),
                access_count=draw(st.integers(0, 15)),
                last_accessed_at=None if accessed_days is None else NOW - accessed_days * DAY,
                archived=draw(st.booleans()),
            )
        )
    return out


@settings(max_examples=300, deadline=None)
@given(entries_strategy(), st.integers(1, 9))
def test_compaction_invariants(entries: list[Entry], slice_size: int) -> None:
    plan = plan_compaction(entries, NOW, SMALL)
    by_id = {e.id: e for e in entries}
    expired, evicted, purged = ids(plan.expired), ids(plan.evicted), ids(plan.purged)

    assert not expired & evicted and not expired & purged and not evicted & purged
    assert all(by_id[i].archived for i in purged)
    assert not any(by_id[i].archived for i in expired | evicted | ids(plan.decayed))
    for i in evicted:
        e = by_id[i]
        assert e.status != "pinned"
        assert (e.last_accessed_at or e.created_at) <= NOW - DAY
    assert not any(by_id[i].status == "pinned" for i in expired | ids(plan.decayed))

    active = [e for e in entries if not e.archived and e.id not in expired]
    protected = [
        e
        for e in active
        if e.status == "pinned" or (e.last_accessed_at or e.created_at) > NOW - DAY
    ]
    if len(active) > SMALL.soft_limit:
        assert plan.counts.active == max(SMALL.target, len(protected))
        kept = [e for e in active if e.id not in evicted and e not in protected]
        if evicted and kept:
            assert max(d.decayed for d in plan.evicted) <= min(
                decayed_importance(e, NOW, SMALL) for e in kept
            )
    else:
        assert not evicted and plan.counts.active == len(active)
    assert plan.counts.active + plan.counts.archived == len(entries) - len(purged)
    assert all(math.isfinite(d.decayed) and d.decayed < d.decayed_from for d in plan.decayed)

    assert last_plan(compaction_steps(entries, NOW, SMALL, slice_size=slice_size)) == plan


def test_a_decision_that_no_longer_holds_is_dropped() -> None:
    old = entry(1, days=100, category="task_progress")
    others = [entry(f"x{i}", days=2, importance=0.9) for i in range(3)]
    plan = plan_compaction([old, *others], NOW, CompactionPolicy(soft_limit=2, target=1))
    (expired,) = plan.expired
    assert still_holds(expired, old, NOW)
    assert not still_holds(expired, None, NOW)  # forgotten meanwhile
    used = msgspec.structs.replace(old, last_accessed_at=NOW - 60, access_count=1)
    assert not still_holds(expired, used, NOW)  # used meanwhile
    assert not still_holds(expired, msgspec.structs.replace(old, status="pinned"), NOW)
    evicted = plan.evicted[0]
    victim = next(e for e in others if e.id == evicted.id)
    assert still_holds(evicted, victim, NOW)
    assert not still_holds(evicted, msgspec.structs.replace(victim, archived=True), NOW)
    archived = msgspec.structs.replace(old, archived=True, updated_at=NOW - 400 * DAY)
    (purged,) = plan_compaction([archived], NOW).purged
    assert still_holds(purged, archived, NOW)
    restored = msgspec.structs.replace(archived, archived=False, updated_at=NOW)
    assert not still_holds(purged, restored, NOW)
