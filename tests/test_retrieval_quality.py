"""Retrieval quality on a labelled set (SPEC §5), measured through the real daemon and client.

``fixtures/retrieval/entries.jsonl`` is the memory of one fictional project (a web shop: FastAPI,
Postgres, Redis, Celery, React, Stripe, Kubernetes, GitHub Actions), with near-duplicates and
distractors that share words with the targets. ``queries.jsonl`` holds prompts written the way
a developer asks an agent, each labelled with the entries a person would want in the top 5:
plain questions, alias words (auth, db, config, test, deps, perf, ui), one-character typos,
word prefixes, and queries that only make sense with an active file.

recall@5 is the mean over queries of |relevant ∩ top 5| / |relevant|; MRR is the mean of
1 / rank of the first relevant result (0 when none is in the top 5).
"""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import Daemon, Env, make_env, memctl, ok_json

FIXTURES = Path(__file__).parent / "fixtures" / "retrieval"
K = 5
TOKEN = re.compile(r"[^\W_]+")  # the word tokens the query side uses

# Measured on this labelled set (288 entries, 83 queries) with the SPEC §5 defaults:
#     recall@5 = 0.914, MRR = 0.856 (0.853 / 0.780 before stemming, loose-match boost and
#     alias terms kept off the category field; 0.908 / 0.856 before search cut at 10 % of the
#     best instead of 30 %). bench/retrieval_quality.py prints recall@10 too, on larger sets.
# The floors are the measured values less 0.05, rounded down to a multiple of 0.05 (recall never
# below 0.80), so that a regression fails while harmless reordering does not. Raise them when
# retrieval improves; the queries that still miss are listed when the test fails.
RECALL_AT_5_FLOOR = 0.85
MRR_FLOOR = 0.80


def _jsonl(name: str) -> list[dict]:
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


ENTRIES = _jsonl("entries.jsonl")
QUERIES = _jsonl("queries.jsonl")
ENTRY = {e["key"]: e for e in ENTRIES}
CONTENT = {key: e["content"] for key, e in ENTRY.items()}


@dataclass
class Corpus:
    env: Env
    key_of: dict[str, str]  # entry id -> fixture key

    def search_results(self, query: str, files: list[str] | None = None) -> list[dict]:
        args = ["search", query, "-k", str(K)]
        for path in files or []:
            args += ["--file", path]
        return ok_json(self.env, *args)["results"]

    def search(self, query: str, files: list[str] | None = None) -> list[str]:
        """The fixture keys of the top ``K`` results of one search."""
        return [self.key_of[r["id"]] for r in self.search_results(query, files)]

    def search_batch(self, queries: list[str]) -> dict[str, list[str]]:
        """Many searches over one connection (``memctl search -``)."""
        result = memctl(self.env, "--json", "search", "-", "-k", str(K), stdin="\n".join(queries))
        assert result.code == 0, result.stderr
        answers = [json.loads(line) for line in result.stdout.splitlines()]
        assert [a["query"] for a in answers] == queries
        return {a["query"]: [self.key_of[r["id"]] for r in a["results"]] for a in answers}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    """One real daemon (the conftest ``Daemon``, private XDG dirs and socket) for the whole
    module, loaded once through ``memctl import -``: searches do not change entries, so the
    tests can share it. Ids are mapped back to fixture keys by content."""
    env = make_env(tmp_path_factory.mktemp("retrieval"))
    daemon = Daemon(env).start()
    try:
        lines = [
            json.dumps({k: v for k, v in e.items() if k != "key"}, ensure_ascii=False)
            for e in ENTRIES
        ]
        imported = ok_json(env, "import", "-", stdin="\n".join(lines) + "\n")
        assert imported["imported"] == len(ENTRIES), imported
        listed = ok_json(env, "list", "--limit", "10000")["entries"]
        key_by_content = {content: key for key, content in CONTENT.items()}
        key_of = {e["id"]: key_by_content[e["content"]] for e in listed}
        assert len(key_of) == len(ENTRIES)
        yield Corpus(env, key_of)
    finally:
        daemon.stop()
        shutil.rmtree(env.vars["XDG_RUNTIME_DIR"], ignore_errors=True)


def _run_all(corpus: Corpus) -> list[tuple[dict, list[str]]]:
    plain = [q["query"] for q in QUERIES if not q.get("files")]
    batch = corpus.search_batch(plain)
    return [
        (q, corpus.search(q["query"], q["files"]) if q.get("files") else batch[q["query"]])
        for q in QUERIES
    ]


def _recall(relevant: list[str], top: list[str]) -> float:
    return len(set(relevant) & set(top[:K])) / len(relevant)


def _reciprocal_rank(relevant: list[str], top: list[str]) -> float:
    for rank, key in enumerate(top[:K], start=1):
        if key in relevant:
            return 1.0 / rank
    return 0.0


def _misses(runs: list[tuple[dict, list[str]]]) -> str:
    lines = []
    for q, top in runs:
        missing = [k for k in q["relevant"] if k not in top]
        if not missing:
            continue
        lines.append(f"- {q['query']!r} files={q.get('files', [])} missing {missing}:")
        lines.extend(f"    want {k}: {CONTENT[k][:100]}" for k in missing)
        lines.extend(f"    got  {k}: {CONTENT[k][:100]}" for k in top)
    return "\n".join(lines)


def test_labelled_set_is_well_formed() -> None:
    keys = [e["key"] for e in ENTRIES]
    assert 250 <= len(keys) == len(set(keys)) <= 350
    assert len({e["content"] for e in ENTRIES}) == len(ENTRIES)
    assert len(QUERIES) >= 45
    assert len({q["query"] for q in QUERIES}) == len(QUERIES)
    for q in QUERIES:
        assert q["relevant"] and set(q["relevant"]) <= set(keys), q


def test_recall_at_5_and_mrr(corpus: Corpus) -> None:
    runs = _run_all(corpus)
    recall = sum(_recall(q["relevant"], top) for q, top in runs) / len(runs)
    mrr = sum(_reciprocal_rank(q["relevant"], top) for q, top in runs) / len(runs)
    detail = f"recall@5 {recall:.3f}, MRR {mrr:.3f}; queries that missed:\n{_misses(runs)}"
    assert recall >= RECALL_AT_5_FLOOR, detail
    assert mrr >= MRR_FLOOR, detail


def _tokens(entry: dict) -> set[str]:
    text = " ".join([entry["content"], *entry["tags"], *entry["file_paths"], entry["category"]])
    return set(TOKEN.findall(text.lower()))


def _rank(keys: list[str], key: str) -> int:
    return keys.index(key) + 1 if key in keys else len(keys) + 1


@pytest.mark.parametrize(
    ("query", "without_alias", "target"),
    [
        # "perf" → performance, latency, slow, speed: the targets say "slow" (e225 is also
        # tagged "performance") but never "perf".
        ("which endpoint had perf problems", "which endpoint had problems", "e225"),
    ],
)
def test_alias_finds_an_entry_that_only_has_the_synonym(
    corpus: Corpus, query: str, without_alias: str, target: str
) -> None:
    assert "perf" not in _tokens(ENTRY[target])
    with_alias = corpus.search(query)
    assert _rank(with_alias, target) <= 2, [CONTENT[k][:80] for k in with_alias]
    assert _rank(with_alias, target) < _rank(corpus.search(without_alias), target)


@pytest.mark.parametrize(
    ("query", "target"),
    [
        # Every word misspelt by one edit (swap, drop, insert), so that only the fuzzy matches
        # can find the entry. (With a correct word beside the typo, the correct word alone
        # usually finds the target: that would not test fuzzy matching.)
        ("stirpe webhok signatrue", "e064"),
        ("pgbouncr prepard statemnt", "e022"),
        ("subscripton prorration", "e219"),
    ],
)
def test_typo_finds_its_target(corpus: Corpus, query: str, target: str) -> None:
    assert not set(TOKEN.findall(query)) & _tokens(ENTRY[target])
    found = corpus.search(query)
    assert found[:1] == [target], [CONTENT[k][:80] for k in found]


def test_active_file_lifts_the_entry_attached_to_it(corpus: Corpus) -> None:
    # Two entries of the same category, length and wording for this query, attached to
    # different files: without a file they score the same; the active file decides.
    query = "how are order dates formatted for the customer's locale"
    web, mail = "e112", "e212"
    web_file, mail_file = ENTRY[web]["file_paths"][0], ENTRY[mail]["file_paths"][0]
    scores = {corpus.key_of[r["id"]]: r["score"] for r in corpus.search_results(query)}
    assert scores[web] == pytest.approx(scores[mail])
    for active, first, second in ((web_file, web, mail), (mail_file, mail, web)):
        found = corpus.search(query, [active])
        assert _rank(found, first) < _rank(found, second), (active, found)


def test_the_bench_sets_are_well_formed() -> None:
    """bench/retrieval_quality.py's own sets: the history's questions name turns it has, and
    the questions over the samples name label items of their project."""
    history = FIXTURES.parent / "retrieval_history"
    sessions = _jsonl_at(history / "sessions.jsonl")
    turns = {f"{s['session']}:{n}" for s in sessions for n in range(1, len(s["turns"]) + 1)}
    assert all(speaker in {"user", "agent"} for s in sessions for speaker, _ in s["turns"])
    asked = _jsonl_at(history / "queries.jsonl")
    assert len({q["query"] for q in asked}) == len(asked) >= 40
    for q in asked:
        assert q["relevant"] and set(q["relevant"]) <= turns, q
    labels = FIXTURES.parent / "capture_labels"
    items = {
        tomllib.loads(f.read_text(encoding="utf-8"))["project"]: {
            i["id"] for i in tomllib.loads(f.read_text(encoding="utf-8"))["item"]
        }
        for f in labels.glob("*-*-*.toml")
    }
    extra = tomllib.loads((FIXTURES.parent / "retrieval_samples" / "queries.toml").read_text())
    assert len(extra["query"]) >= 30
    for q in extra["query"]:
        assert q["want"] and set(q["want"]) <= items[q["project"]], q


def _jsonl_at(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
