"""The relevance floor of ``inject --query``, measured on the labelled queries (issue 19).

After a preset has captured the labelled sessions, the daemon is started once per floor
(``retrieval.inject_min_shared``: query words an injected entry must share) and every labelled
query asks ``memctl inject --query`` in its project, as an agent's hook would. An entry that
comes back is relevant when it holds one of the query's wanted label items; a wanted item is
reachable when some entry of the project holds it (the floor cannot return what memory lacks).

  returned   entries injected over all queries
  precision  relevant returned / returned
  recall     wanted items in what came back / reachable wanted items
  F1         the harmonic mean of the two: the floor is chosen where it is highest
  noise      entries returned for the queries nothing answers (``want = []``)
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from typing import Any

from bench.capture_labels import Query, SessionLabels
from tests.conftest import Daemon, Env, memctl

FLOORS = (0, 1, 2, 3)


@dataclass
class FloorScore:
    floor: int
    returned: int = 0
    relevant: int = 0
    reachable: int = 0
    found: int = 0
    noise: int = 0


def _injected(env: Env, query: Query, cwd: Any) -> list[str]:
    result = memctl(env, "--json", "inject", "--query", query.text, cwd=cwd)
    if result.code != 0:
        raise RuntimeError(f"inject --query {query.text!r} exited {result.code}: {result.stderr}")
    return list(json.loads(result.stdout)["entries"])


def measure(
    env: Env,
    extra: dict[str, str],
    queries: list[Query],
    projects: dict[str, tuple[Any, SessionLabels, list[dict[str, Any]]]],
) -> list[FloorScore]:
    """``projects``: name → (folder, labels, entries as memctl list gives them). Each floor
    starts from the same stores: an injection counts as an access, which would rank the
    entries one floor returned higher for the next."""
    scores = []
    snapshot = env.root / "data-before-queries"
    shutil.copytree(env.data, snapshot)
    for floor in FLOORS:
        shutil.rmtree(env.data)
        shutil.copytree(snapshot, env.data)
        score = FloorScore(floor)
        daemon = Daemon(env, extra | {"MEMORYD_RETRIEVAL__INJECT_MIN_SHARED": str(floor)}).start()
        try:
            for query in queries:
                folder, labels, entries = projects[query.project]
                by_id = {e["id"]: e["content"] for e in entries}
                items = [i for i in labels.items if i.id in query.want]
                back = [by_id[i] for i in _injected(env, query, folder) if i in by_id]
                score.returned += len(back)
                score.relevant += sum(any(i.matches(t) for i in items) for t in back)
                reachable = [i for i in items if any(i.matches(t) for t in by_id.values())]
                score.reachable += len(reachable)
                score.found += sum(any(i.matches(t) for t in back) for i in reachable)
                score.noise += 0 if query.want else len(back)
        finally:
            daemon.stop()
        scores.append(score)
    return scores


def table(preset: str, scores: list[FloorScore], current: int) -> str:
    rows = [
        f"inject --query relevance floor ({preset}; * = the default)",
        f"{'floor':>6} {'returned':>8} {'precision':>12} {'recall':>12} {'F1':>5} {'noise':>5}",
    ]
    for s in scores:
        precision = (
            f"{s.relevant / s.returned:4.2f} {s.relevant:>2}/{s.returned:<3}"
            if s.returned
            else "   -"
        )
        recall = (
            f"{s.found / s.reachable:4.2f} {s.found:>2}/{s.reachable:<3}" if s.reachable else "   -"
        )
        mark = "*" if s.floor == current else " "
        p = s.relevant / s.returned if s.returned else 0.0
        r = s.found / s.reachable if s.reachable else 0.0
        f1 = 2 * p * r / (p + r) if p + r else 0.0
        counts = f"{s.returned:>8} {precision:>12} {recall:>12} {f1:5.2f} {s.noise:>5}"
        rows.append(f"{s.floor:>5}{mark} {counts}")
    return "\n".join(rows)
