"""The token budget of an injection payload (design §5, Budget).

total = min(ceiling, floor(remaining_context × 0.08)). Four tiers in priority order share it;
each gets a floor of 200 tokens when the total allows, and what a tier leaves unused flows to the
next. Items are packed whole, in the order given, and the payload never exceeds the total.

A session start may add two tiers, ranked right after the always-inject tier: the instruction
files (design §11) and the memory bank's summary and protocol (design §10). They
are paid for by the session bridge, which has little to carry when a session starts, so every
other tier keeps its design share; a payload without them is allocated exactly as before.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

import msgspec

TIERS: tuple[str, ...] = ("always", "session", "retrieval", "summaries")
SHARES: dict[str, float] = {
    "always": 0.08,
    "session": 0.46,
    "retrieval": 0.30,
    "summaries": 0.12,
    # The session-start tiers, taken out of the session bridge's share when present. Seed 003
    # gives instruction files 10 % of a model's context; here they get 20 % of a payload that is
    # itself at most 8 % of it. The bank's summary and protocol text fit in ~400 tokens.
    "instructions": 0.20,  # [instructions] budget_percent sets it
    "bank": 0.08,
}
# The most the instruction files may take: the session bridge funds them and the bank.
MAX_INSTRUCTIONS_SHARE = SHARES["session"] - SHARES["bank"]
EXTRA_TIERS: tuple[str, ...] = ("instructions", "bank")
FUNDED_BY = "session"
# Every tier in priority order: the extra ones rank right after the always-inject tier.
ORDER: tuple[str, ...] = (TIERS[0], *EXTRA_TIERS, *TIERS[1:])
# Tiers whose items come weakest first (instruction files: the strongest sits closest to the
# prompt, design §11) but are kept strongest first when they do not all fit.
FROM_END = frozenset({"instructions"})
TIER_FLOOR = 200
CONTEXT_SHARE = 0.08
DEFAULT_CEILING = 5000


class TokenCounter(Protocol):
    def __call__(self, text: str) -> int: ...


def count_tokens(text: str) -> int:
    """The default counter: ceil(chars / 4). Subadditive, so parts never under-count a whole."""
    return math.ceil(len(text) / 4)


def total_budget(ceiling: int, remaining_context: int | None) -> int:
    if remaining_context is None:
        return max(0, ceiling)
    return max(0, min(ceiling, math.floor(remaining_context * CONTEXT_SHARE)))


def in_play(extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The tiers of a payload, in priority order: the four, and those of ``extra`` it has."""
    wanted = set(TIERS) | (set(extra) & set(EXTRA_TIERS))
    return tuple(tier for tier in ORDER if tier in wanted)


def shares(tiers: Sequence[str], extra: Mapping[str, float] | None = None) -> dict[str, float]:
    """Each tier's share of the total when ``tiers`` are in play; ``extra``: the extra tiers'
    shares where configured (each at most what the session bridge can fund)."""
    own = {**SHARES, **{t: s for t, s in (extra or {}).items() if t in EXTRA_TIERS}}
    result = {tier: own[tier] for tier in tiers}
    for tier in tiers:
        if tier in EXTRA_TIERS:
            result[FUNDED_BY] -= own[tier]
    return result


def allocate(
    total: int, tiers: Sequence[str] = TIERS, extra: Mapping[str, float] | None = None
) -> dict[str, int]:
    """Quotas per tier (``tiers``, in priority order) summing exactly to ``total``."""
    if total < TIER_FLOOR * len(tiers):
        # Not every floor fits: serve tiers in priority order, a floor each, until it runs out.
        quotas, left = {}, total
        for tier in tiers:
            quotas[tier] = min(TIER_FLOOR, left)
            left -= quotas[tier]
        return quotas
    share = shares(tiers, extra)
    quotas = {tier: math.floor(total * share[tier]) for tier in tiers}
    deficit = sum(max(0, TIER_FLOOR - q) for q in quotas.values())
    for tier in tiers:
        quotas[tier] = max(quotas[tier], TIER_FLOOR)
    # Pay for the raised floors out of the tiers above their floor, largest excess first.
    for tier in sorted(tiers, key=lambda t: quotas[t] - TIER_FLOOR, reverse=True):
        take = min(deficit, quotas[tier] - TIER_FLOOR)
        quotas[tier] -= take
        deficit -= take
    # Rounding and the unshared remainder go to the first tier; unused, they flow down.
    quotas[tiers[0]] += total - sum(quotas.values())
    return quotas


def take(costs: Sequence[int], room: int, *, from_end: bool = False) -> list[int]:
    """The indexes of the items taken whole within ``room``, greedily in order (from the end:
    the last, strongest, first; a weaker, smaller one may still fit), ascending."""
    order = range(len(costs) - 1, -1, -1) if from_end else range(len(costs))
    chosen, used = [], 0
    for index in order:
        if used + costs[index] <= room:
            chosen.append(index)
            used += costs[index]
    return sorted(chosen)


class Packed(msgspec.Struct, frozen=True):
    chosen: dict[str, list[int]]  # tier → indexes of the items taken, in order
    used: dict[str, int]
    quotas: dict[str, int]

    @property
    def total_used(self) -> int:
        return sum(self.used.values())


def pack(
    total: int, costs: Mapping[str, Sequence[int]], extra: Mapping[str, float] | None = None
) -> Packed:
    """Choose items per tier by their token cost within quota plus carry-over. The extra tiers
    are in play only when ``costs`` has items for them; ``extra``: their configured shares."""
    tiers = in_play(tier for tier, tier_costs in costs.items() if tier_costs)
    quotas = allocate(total, tiers, extra)
    chosen: dict[str, list[int]] = {}
    used: dict[str, int] = {}
    carry = 0
    for tier in tiers:
        room = quotas[tier] + carry
        tier_costs = costs.get(tier, ())
        # Every room is a tier's quota plus what the tiers above left: the sum never passes
        # the total.
        chosen[tier] = take(tier_costs, room, from_end=tier in FROM_END)
        used[tier] = sum(tier_costs[i] for i in chosen[tier])
        carry = room - used[tier]
    return Packed(chosen=chosen, used=used, quotas=quotas)
