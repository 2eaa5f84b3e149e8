"""Review (``memctl review``): what memory learned, shown to its user to accept, reject or reword.

Pure: the service hands in the candidates and findings waiting for review and what the project
knows about them; this module says why each scored what it scored and plans the one event each
decision is. A candidate is an entry capture promoted (still in quarantine); a finding is
captured text not promoted. Both are named by their own id (or a unique prefix of it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Literal

import msgspec

from memctl import protocol as p
from memoryd.core.capture.findings import SessionFinding
from memoryd.core.capture.promotion import Preset, PromotionDecision, candidate_entry, decide
from memoryd.core.entries import clean_content, fingerprint, new_entry
from memoryd.core.errors import Ambiguous, BadRequest, EntryNotFound
from memoryd.core.events import ReviewAccepted, ReviewRejected
from memoryd.core.redaction import redact

ID_PREFIX_MIN = 4
Item = p.Entry | SessionFinding


class Knowledge:
    """What the project knows that a score depends on: the sessions and agents each
    fingerprint was seen in, the pinned fingerprints, the preset in effect."""

    def __init__(
        self,
        *,
        preset: Preset,
        sessions: Mapping[str, AbstractSet[str]],
        agents: Mapping[str, AbstractSet[str]],
        pinned: AbstractSet[str],
    ) -> None:
        self.preset = preset
        self.sessions = sessions
        self.agents = agents
        self.pinned = pinned

    def score(self, finding: SessionFinding) -> PromotionDecision:
        """The decision promotion would take on ``finding`` now, with its signals and points."""
        return decide(
            finding,
            preset=self.preset,
            sessions=self.sessions.get(finding.fingerprint, frozenset()),
            agents=self.agents.get(finding.fingerprint, frozenset()),
            pinned=finding.fingerprint in self.pinned,
        )


def resolve(pool: Sequence[Item], wanted: str) -> Item:
    """The item of ``pool`` named by ``wanted``: its id, or a unique prefix of 4+ characters."""
    key = wanted.strip().lower()
    exact = [i for i in pool if i.id == key]
    if exact:
        return exact[0]
    found = [i for i in pool if len(key) >= ID_PREFIX_MIN and i.id.startswith(key)]
    if not found:
        raise EntryNotFound(f"nothing waiting for review is named {wanted!r} (see memctl review)")
    if len(found) > 1:
        raise Ambiguous(f"{len(found)} items waiting for review start with {wanted!r}")
    return found[0]


def plan_accept(
    items: Sequence[Item],
    *,
    now: float,
    new_id: Callable[[], str],
    transcript_of: Callable[[SessionFinding], str | None],
) -> ReviewAccepted:
    """Candidates become confirmed; each finding becomes a confirmed entry sourced to its
    transcript (the user's word is what a candidate's quarantine waits for)."""
    confirmed: list[str] = []
    added: list[p.Entry] = []
    promoted_from: list[tuple[str, str]] = []
    for item in _unique(items):
        if isinstance(item, p.Entry):
            confirmed.append(item.id)
            continue
        entry = _confirmed(
            candidate_entry(item, entry_id=new_id(), now=now, transcript_path=transcript_of(item))
        )
        added.append(entry)
        promoted_from.append((item.id, entry.id))
    return ReviewAccepted(
        confirmed=tuple(confirmed),
        added=tuple(added),
        promoted_from=tuple(promoted_from),
        accepted_at=now,
    )


def plan_edit(
    item: Item,
    content: str,
    *,
    now: float,
    new_id: Callable[[], str],
    transcript_of: Callable[[SessionFinding], str | None],
    taken: Callable[[str], bool],
) -> ReviewAccepted:
    """The user's own words for ``item``, confirmed. The captured words are settled, so capture
    does not bring them back beside the reworded entry. ``taken`` says whether an active entry
    holds a fingerprint already."""
    if not content.strip():
        raise BadRequest(
            "the edited text is empty: nothing changed (memctl review reject drops it)"
        )
    # The user's words are input like a `remember`: redacted and held to the same limits.
    text = clean_content(redact(content).text)
    if fingerprint(text) == item.fingerprint:
        return plan_accept([item], now=now, new_id=new_id, transcript_of=transcript_of)
    if taken(fingerprint(text)):
        raise BadRequest("an entry holds this text already: accept or reject the item instead")
    source = (
        item.source
        if isinstance(item, p.Entry)
        else candidate_entry(item, entry_id="", now=now, transcript_path=transcript_of(item)).source
    )
    entry = new_entry(
        entry_id=new_id(),
        content=text,
        category=item.category,
        status="confirmed",
        now=now,
        source=source,
        tags=item.tags,
        file_paths=item.file_paths,
        importance=item.importance,
    )
    if isinstance(item, p.Entry):
        return ReviewAccepted(
            added=(entry,), replaced=((item.id, entry.id),), settled=(item.fingerprint,),
            accepted_at=now,
        )  # fmt: skip
    return ReviewAccepted(
        added=(entry,), promoted_from=((item.id, entry.id),), settled=(item.fingerprint,),
        accepted_at=now,
    )  # fmt: skip


def plan_reject(items: Sequence[Item], reason: str, *, now: float) -> ReviewRejected:
    """Candidates are archived; every fingerprint is settled for good."""
    unique = _unique(items)
    return ReviewRejected(
        archived=tuple(i.id for i in unique if isinstance(i, p.Entry)),
        findings=tuple(i.id for i in unique if isinstance(i, SessionFinding)),
        fingerprints=tuple(dict.fromkeys(i.fingerprint for i in unique)),
        reason=redact(reason.strip()).text,
        rejected_at=now,
    )


def decision_of(
    action: Literal["accepted", "rejected", "edited"],
    named: Sequence[str],
    event: ReviewAccepted | ReviewRejected,
) -> p.ReviewDecisionResult:
    """The reply a decision gave, rebuilt from its event and the names its request gave: for a
    retry whose first reply was lost (the daemon died between the change and the reply). Each
    name is resolved among the items the event acted on, as ``resolve`` resolved it among all
    those waiting (a prefix unique among them is unique among these)."""
    if isinstance(event, ReviewRejected):
        acted = [*event.archived, *event.findings]
        entries = list(event.archived)
    else:
        acted = [*event.confirmed, *(f for f, _ in event.promoted_from)]
        acted += [old for old, _ in event.replaced]
        entries = [*event.confirmed, *(e.id for e in event.added)]
    return p.ReviewDecisionResult(
        action=action, ids=[_acted_on(acted, name) for name in named], entries=entries
    )


def _acted_on(acted: Sequence[str], wanted: str) -> str:
    key = wanted.strip().lower()
    if key in acted:
        return key
    found = [i for i in acted if len(key) >= ID_PREFIX_MIN and i.startswith(key)]
    return found[0] if len(found) == 1 else key


def _unique(items: Sequence[Item]) -> list[Item]:
    return list({i.id: i for i in items}.values())


def _confirmed(entry: p.Entry) -> p.Entry:
    return msgspec.structs.replace(entry, status="confirmed")
