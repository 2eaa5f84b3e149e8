"""The budget allocator and the payload builder (SPEC §5 Budget): a property test proves the
payload never exceeds its budget, every tier's floor holds when the total allows it, and each
tier stays within its share (what the tiers above leave flowing down), the session-start tiers
(instruction files, the memory bank) included."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.core.recall import budget, formatting, injection
from memoryd.core.recall.budget import (
    EXTRA_TIERS,
    ORDER,
    TIER_FLOOR,
    TIERS,
    allocate,
    count_tokens,
    in_play,
    pack,
    shares,
    take,
    total_budget,
)
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


def test_session_start_tiers_are_paid_for_by_the_session_bridge() -> None:
    assert in_play() == TIERS and in_play(["bank", "nonsense"]) == (
        "always", "bank", "session", "retrieval", "summaries"
    )  # fmt: skip
    assert allocate(5000, ORDER) == {
        "always": 600,  # its 8 % and the unshared 4 %, as without the extra tiers
        "instructions": 1000,
        "bank": 400,
        "session": 900,
        "retrieval": 1500,
        "summaries": 600,
    }
    with_bank = allocate(5000, in_play(["bank"]))
    assert with_bank["session"] == 1900 and with_bank["retrieval"] == 1500
    assert abs(sum(shares(ORDER).values()) - sum(shares(TIERS).values())) < 1e-9


tier_sets = st.sets(st.sampled_from(EXTRA_TIERS)).map(in_play)


@given(st.integers(min_value=0, max_value=200_000), tier_sets)
def test_allocation_sums_to_total_and_floors_hold(total: int, tiers: tuple[str, ...]) -> None:
    quotas = allocate(total, tiers)
    assert list(quotas) == list(tiers)
    assert sum(quotas.values()) == total and all(q >= 0 for q in quotas.values())
    if total >= TIER_FLOOR * len(tiers):
        assert all(q >= TIER_FLOOR for q in quotas.values()), quotas


@given(st.integers(min_value=TIER_FLOOR * 40, max_value=200_000), tier_sets)
def test_each_tier_gets_its_share_when_floors_do_not_bind(total: int, tiers) -> None:
    quotas, share = allocate(total, tiers), shares(tiers)
    assert all(quotas[t] == int(total * share[t]) for t in tiers[1:]), quotas
    assert quotas[tiers[0]] >= int(total * share[tiers[0]])  # and the rounding


costs = st.lists(st.integers(min_value=1, max_value=400), max_size=40)
demands = st.fixed_dictionaries({t: costs for t in TIERS}, optional={t: costs for t in EXTRA_TIERS})


def within_shares(packed) -> None:
    """Each tier used at most its quota plus what the tiers above it left unused."""
    used = quota = 0
    for tier in packed.quotas:
        used, quota = used + packed.used[tier], quota + packed.quotas[tier]
        assert used <= quota, (tier, packed)


@given(st.integers(min_value=0, max_value=20_000), demands)
def test_pack_never_exceeds_total(total: int, demand: dict[str, list[int]]) -> None:
    packed = pack(total, demand)
    assert packed.total_used <= total
    assert tuple(packed.quotas) == in_play(t for t in EXTRA_TIERS if demand.get(t))
    within_shares(packed)
    for tier in packed.quotas:
        assert packed.used[tier] == sum(demand[tier][i] for i in packed.chosen[tier])
        assert packed.chosen[tier] == sorted(set(packed.chosen[tier]))


@given(st.integers(min_value=TIER_FLOOR * len(ORDER), max_value=20_000))
def test_each_tier_gets_its_floor_when_it_has_demand(total: int) -> None:
    # Plenty of one-token items in every tier: each tier fills at least its floor.
    packed = pack(total, {t: [1] * total for t in ORDER})
    assert all(packed.used[t] >= TIER_FLOOR for t in ORDER), packed.used
    assert packed.total_used == total


def test_instruction_files_keep_the_strongest_whole() -> None:
    # Weakest first, as they are rendered: the strongest (last) is kept, a weaker, smaller one
    # may still fit after a bigger one is dropped.
    assert take([10, 10, 10, 10], 25, from_end=True) == [2, 3]
    assert take([5, 30, 20], 26, from_end=True) == [0, 2]
    assert take([5, 30, 20], 26) == [0, 2] and take([20, 5, 30], 26) == [0, 1]
    packed = pack(1000, {"instructions": [150, 150, 150]})  # five tiers in play: 200 each
    assert packed.quotas["instructions"] == 200
    assert packed.chosen["instructions"] == [1, 2]  # its quota and what "always" left


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
blocks = st.lists(  # instruction files and bank texts: many lines, any characters
    st.builds(
        Item,
        kind=st.sampled_from(["instruction", "bank_summary", "bank_protocol", "bank_update"]),
        text=st.text(max_size=2400),
        origin=st.text(max_size=80),
    ),
    max_size=6,
)


@settings(max_examples=300)
@given(
    st.sampled_from(FORMATS),
    st.integers(min_value=0, max_value=6000),
    st.fixed_dictionaries({t: items for t in TIERS}, optional={t: blocks for t in EXTRA_TIERS}),
)
def test_payload_never_exceeds_budget(fmt, total: int, tiers: dict[str, list[Item]]) -> None:
    payload = injection.build(fmt, total, tiers)
    assert count_tokens(payload.text) <= total
    assert payload.tokens == count_tokens(payload.text)
    assert sum(payload.tiers.values()) <= total
    assert tuple(payload.tiers) == in_play(t for t in EXTRA_TIERS if tiers.get(t))
    if payload.text:
        within_shares(pack(total - _overhead(fmt, tiers), _costs(fmt, tiers)))
    else:
        assert payload.ids == []


def _overhead(fmt, tiers: dict[str, list[Item]]) -> int:
    extra = [t for t in EXTRA_TIERS if tiers.get(t)]
    return sum(count_tokens(piece) for piece in formatting.frame_text(fmt, extra))


def _costs(fmt, tiers: dict[str, list[Item]]) -> dict[str, list[int]]:
    return {
        t: [count_tokens(formatting.item(fmt, it)) for it in found] for t, found in tiers.items()
    }


def test_payload_uses_the_default_ceiling() -> None:
    entries = [
        Item(kind="entry", text="x" * 400, id=f"{i:032x}", category="decision", status="confirmed")
        for i in range(200)
    ]
    payload = injection.build("claude", budget.DEFAULT_CEILING, {"retrieval": entries})
    assert 4000 < payload.tokens <= 5000


def test_a_configured_instruction_share_is_funded_by_the_session_bridge() -> None:
    """``[instructions] budget_percent`` moves the instruction tier's share; the session bridge
    pays for it, every other tier keeps its share, and the quotas still sum to the total."""
    tiers = budget.in_play(["instructions", "bank"])
    default = budget.allocate(10_000, tiers)
    wider = budget.allocate(10_000, tiers, {"instructions": 0.30})
    assert wider["instructions"] == default["instructions"] + 1_000
    assert wider["session"] == default["session"] - 1_000
    assert {t: wider[t] for t in ("retrieval", "summaries", "bank")} == {
        t: default[t] for t in ("retrieval", "summaries", "bank")
    }
    assert sum(wider.values()) == 10_000
    # Without the instruction tier in play, the setting changes nothing.
    assert budget.allocate(10_000, budget.TIERS, {"instructions": 0.30}) == budget.allocate(
        10_000, budget.TIERS
    )
