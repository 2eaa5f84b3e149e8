"""The budget allocator and the payload builder (SPEC §5 Budget): a property test proves the
payload never exceeds its budget and every tier's floor holds when the total allows it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.core.recall import budget, injection
from memoryd.core.recall.budget import TIER_FLOOR, TIERS, allocate, count_tokens, pack, total_budget
from memoryd.core.recall.formatting import FORMATS, Item


def test_total_budget_follows_context_and_ceiling() -> None:
    assert total_budget(5000, None) == 5000
    assert total_budget(5000, 100_000) == 5000
    assert total_budget(5000, 50_000) == 4000
    assert total_budget(5000, 8_000) == 640
    assert total_budget(300, 100_000) == 300


def test_allocation_at_the_seed_table_points() -> None:
    assert allocate(5000) == {"always": 600, "session": 2300, "retrieval": 1500, "summaries": 600}
    small = allocate(640)  # not every floor fits: priority order
    assert small == {"always": 200, "session": 200, "retrieval": 200, "summaries": 40}
    assert allocate(800) == dict.fromkeys(TIERS, 200)


@given(st.integers(min_value=0, max_value=200_000))
def test_allocation_sums_to_total_and_floors_hold(total: int) -> None:
    quotas = allocate(total)
    assert sum(quotas.values()) == total and all(q >= 0 for q in quotas.values())
    if total >= TIER_FLOOR * len(TIERS):
        assert all(q >= TIER_FLOOR for q in quotas.values()), quotas


costs = st.lists(st.integers(min_value=1, max_value=400), max_size=40)


@given(st.integers(min_value=0, max_value=20_000), st.fixed_dictionaries({t: costs for t in TIERS}))
def test_pack_never_exceeds_total(total: int, demand: dict[str, list[int]]) -> None:
    packed = pack(total, demand)
    assert packed.total_used <= total
    for tier in TIERS:
        assert packed.used[tier] == sum(demand[tier][i] for i in packed.chosen[tier])
        assert packed.chosen[tier] == sorted(set(packed.chosen[tier]))


@given(st.integers(min_value=TIER_FLOOR * 4, max_value=20_000))
def test_each_tier_gets_its_floor_when_it_has_demand(total: int) -> None:
    # Plenty of one-token items in every tier: each tier fills at least its floor.
    packed = pack(total, {t: [1] * total for t in TIERS})
    assert all(packed.used[t] >= TIER_FLOOR for t in TIERS), packed.used
    assert packed.total_used == total


def test_unused_quota_flows_to_the_next_tier() -> None:
    packed = pack(1000, {"always": [], "session": [10], "retrieval": [1] * 2000, "summaries": []})
    assert packed.used["session"] == 10
    # retrieval gets its own quota plus what always and session left unused.
    assert (
        packed.used["retrieval"]
        == packed.quotas["always"] + packed.quotas["session"] - 10 + packed.quotas["retrieval"]
    )


text = st.text(max_size=600)
items = st.lists(
    st.builds(
        Item,
        kind=st.sampled_from(["entry", "conflict", "finding", "episode"]),
        text=text,
        id=st.text(max_size=40),
        category=st.text(max_size=20),
        status=st.text(max_size=12),
    ),
    max_size=25,
)


@settings(max_examples=300)
@given(
    st.sampled_from(FORMATS),
    st.integers(min_value=0, max_value=6000),
    st.fixed_dictionaries({t: items for t in TIERS}),
)
def test_payload_never_exceeds_budget(fmt, total: int, tiers: dict[str, list[Item]]) -> None:
    payload = injection.build(fmt, total, tiers)
    assert count_tokens(payload.text) <= total
    assert payload.tokens == count_tokens(payload.text)
    assert sum(payload.tiers.values()) <= total
    if not payload.text:
        assert payload.ids == []


def test_payload_uses_the_default_ceiling() -> None:
    entries = [
        Item(kind="entry", text="x" * 400, id=f"{i:032x}", category="decision", status="confirmed")
        for i in range(200)
    ]
    payload = injection.build("claude", budget.DEFAULT_CEILING, {"retrieval": entries})
    assert 4000 < payload.tokens <= 5000
