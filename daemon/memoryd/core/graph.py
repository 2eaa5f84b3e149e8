"""The knowledge graph and working memory of design §9 (design §2 Edge, §9): the rules a new edge or
a focus must pass, and the walk over a neighbourhood. Pure: the store is reached only through the
function a caller passes in."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from memctl.protocol import Edge, Entry, Relation
from memoryd.core.errors import BadRequest, Conflict, TooLarge
from memoryd.core.events import EdgeAdded, WorkingMemoryFocused

MAX_FOCUS = 20  # entries a session's working memory holds: it is read on every prompt
MAX_GRAPH_NODES = 200  # nodes one graph answer shows


def plan_connect(
    source: Entry, target: Entry, relation: Relation, existing: Sequence[Edge], now: float
) -> EdgeAdded:
    """The edge ``source`` ``relation`` ``target``; refused for a self-loop or an edge that
    exists already (``existing``: the edges touching ``source``)."""
    if source.id == target.id:
        raise BadRequest(f"an entry cannot be connected to itself ({source.id[:8]})")
    for edge in existing:
        if (edge.source, edge.target, edge.relation) == (source.id, target.id, relation):
            raise Conflict(f"{source.id[:8]} {relation} {target.id[:8]} exists already")
    return EdgeAdded(source_id=source.id, target_id=target.id, relation=relation, created_at=now)


def plan_focus(
    session_id: str, held: Sequence[str], entries: Sequence[Entry], now: float
) -> WorkingMemoryFocused | None:
    """The entries to add to a session's working memory (``held``: what it holds), in the order
    asked; None when all of them are there already. Archived entries are never injected, so
    focusing one is refused rather than silently doing nothing."""
    for entry in entries:
        if entry.archived:
            raise Conflict(
                f"{entry.id[:8]} is archived ({entry.archived_reason}): unarchive it first"
            )
    new = tuple(dict.fromkeys(e.id for e in entries if e.id not in held))
    if len(held) + len(new) > MAX_FOCUS:
        raise TooLarge(
            f"working memory holds at most {MAX_FOCUS} entries; session {session_id} has"
            f" {len(held)} and this adds {len(new)} (release some first)"
        )
    return WorkingMemoryFocused(session_id=session_id, ids=new, focused_at=now) if new else None


def walk(
    start: str,
    depth: int,
    edges_of: Callable[[list[str]], list[Edge]],
    max_nodes: int = MAX_GRAPH_NODES,
) -> tuple[dict[str, int], list[Edge], bool]:
    """Breadth-first over edges in either direction from ``start``, ``depth`` steps at most:
    (node id → its distance, the edges among those nodes, whether ``max_nodes`` cut the walk).
    ``edges_of(ids)`` gives the edges touching any of ``ids``; it is called once per step."""
    distance = {start: 0}
    frontier = [start]
    truncated = False
    for step in range(1, depth + 1):
        found: list[str] = []
        for edge in edges_of(frontier):
            for node in (edge.source, edge.target):
                if node in distance:
                    continue
                if len(distance) >= max_nodes:
                    truncated = True
                    continue
                distance[node] = step
                found.append(node)
        if not found:
            break
        frontier = found
    edges = [e for e in edges_of(list(distance)) if e.source in distance and e.target in distance]
    return distance, edges, truncated
