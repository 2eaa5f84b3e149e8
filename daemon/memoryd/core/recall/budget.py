"""The token budget of an injection payload (design §5 Budget; design §5, made consistent).

total = min(ceiling, floor(remaining_context × 0.08)). Four tiers in priority order share it;
each gets a floor of 200 tokens when the total allows, and what a tier leaves unused flows to the
next. Items are packed whole, in the order given, and the payload never exceeds the total.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import msgspec

TIERS: tuple[str, ...] = ("always", "session", "retrieval", "summaries")
SHARES: dict[str, float] = {"always": 0.08, "session": 0.46, "retrieval": 0.30, "summaries": 0.12}
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


def allocate(total: int) -> dict[str, int]:
    """Quotas per tier summing exactly to ``total``."""
    if total < TIER_FLOOR * len(TIERS):
        # Not every floor fits: serve tiers in priority order, a floor each, until it runs out.
        quotas, left = {}, total
        for tier in TIERS:
            quotas[tier] = min(TIER_FLOOR, left)
            left -= quotas[tier]
        return quotas
    quotas = {tier: math.floor(total * SHARES[tier]) for tier in TIERS}
    deficit = sum(max(0, TIER_FLOOR - q) for q in quotas.values())
    for tier in TIERS:
        quotas[tier] = max(quotas[tier], TIER_FLOOR)
    # Pay for the raised floors out of the tiers above their floor, largest excess first.
    for tier in sorted(TIERS, key=lambda t: quotas[t] - TIER_FLOOR, reverse=True):
        take = min(deficit, quotas[tier] - TIER_FLOOR)
        quotas[tier] -= take
        deficit -= take
    # Rounding and the unshared remainder go to the first tier; unused, they flow down.
    quotas[TIERS[0]] += total - sum(quotas.values())
    return quotas


class Packed(msgspec.Struct, frozen=True):
    chosen: dict[str, list[int]]  # tier → indexes of the items taken, in order
    used: dict[str, int]
    quotas: dict[str, int]

    @property
    def total_used(self) -> int:
        return sum(self.used.values())


def pack(total: int, costs: dict[str, Sequence[int]]) -> Packed:
    """Choose items per tier by their token cost, in order, within quota plus carry-over."""
    quotas = allocate(total)
    chosen: dict[str, list[int]] = {tier: [] for tier in TIERS}
    used: dict[str, int] = dict.fromkeys(TIERS, 0)
    carry, spent = 0, 0
    for tier in TIERS:
        room = quotas[tier] + carry
        for index, cost in enumerate(costs.get(tier, ())):
            if used[tier] + cost <= room and spent + cost <= total:
                chosen[tier].append(index)
                used[tier] += cost
                spent += cost
        carry = room - used[tier]
    return Packed(chosen=chosen, used=used, quotas=quotas)
