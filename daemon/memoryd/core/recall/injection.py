"""Building an injection payload: items per tier → priced lines → packed within the budget →
framed text. Pure; the service layer gathers the items."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from memoryd.core.recall import formatting
from memoryd.core.recall.budget import EXTRA_TIERS, TokenCounter, count_tokens, in_play, pack
from memoryd.core.recall.formatting import Format, Item


class Payload(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    tokens: int
    budget: int
    tiers: dict[str, int]  # tier → tokens used, for the tiers in play
    ids: list[str]  # entry ids shown, in payload order


def build(
    fmt: Format,
    budget: int,
    items: Mapping[str, Sequence[Item]],
    counter: TokenCounter = count_tokens,
    shares: Mapping[str, float] | None = None,
) -> Payload:
    """The payload for ``items``; its token count never exceeds ``budget``. The frame's cost is
    reserved first, and each line is priced alone (a subadditive counter never makes the joined
    text dearer than its priced parts). The extra tiers (``budget.EXTRA_TIERS``) are in play
    only when ``items`` has some for them; ``shares``: their configured shares."""
    extra = [tier for tier in EXTRA_TIERS if items.get(tier)]
    tiers = in_play(extra)
    overhead = sum(counter(piece) for piece in formatting.frame_text(fmt, extra))
    lines = {tier: [formatting.item(fmt, it) for it in items.get(tier, ())] for tier in tiers}
    if budget <= overhead:
        return Payload(text="", tokens=0, budget=budget, tiers=dict.fromkeys(tiers, 0), ids=[])
    costs: dict[str, Sequence[int]] = {t: [counter(line) for line in lines[t]] for t in tiers}
    packed = pack(budget - overhead, costs, shares)
    chosen = {tier: [lines[tier][i] for i in packed.chosen[tier]] for tier in tiers}
    text = formatting.frame(fmt, chosen)
    ids = [
        it.id
        for tier in tiers
        for i in packed.chosen[tier]
        if (it := items[tier][i]).kind == "entry" and it.id
    ]
    return Payload(
        text=text,
        tokens=counter(text),
        budget=budget,
        tiers=dict(packed.used),
        ids=list(dict.fromkeys(ids)),
    )
