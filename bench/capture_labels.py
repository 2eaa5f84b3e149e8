"""The labelled capture set (tests/fixtures/capture_labels/, issue 19): loading and matching.

A label item says what a teammate should learn from a session; its rules say how to recognise
that fact in produced text whatever the wording (the README beside the labels describes them).
Junk patterns name kinds of noise. Pure stdlib, so the bench and the tests share it.
"""

from __future__ import annotations

import html
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

LABELS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "capture_labels"
CATEGORIES = frozenset(
    {"task_progress", "discovery", "file_change", "warning", "decision", "error", "pattern",
     "architecture", "spec", "preference"}
)  # fmt: skip
WEIGHTS = frozenset({"core", "normal"})
JUNK_SCOPES = ("all", "payload")
_SEPARATORS = re.compile(r"[-_\s]+")
# One remembered item of a payload: an element of the claude format, else a line.
_ELEMENT = re.compile(r"<(entry|finding|episode)\b[^>]*>(.*?)</\1>", re.DOTALL)


def normalize(text: str) -> str:
    """HTML entities unescaped, lower case, '-', '_' and white space runs become one space."""
    return _SEPARATORS.sub(" ", html.unescape(text).lower()).strip()


@cache
def _term_pattern(term: str) -> re.Pattern[str]:
    prefix = term.endswith("*")
    core = normalize(term.rstrip("*"))
    if not core:
        raise ValueError(f"empty term {term!r}")
    head = r"(?<![a-z0-9])" if core[0].isalnum() else ""
    tail = "" if prefix or not core[-1].isalnum() else r"(?![a-z0-9])"
    return re.compile(head + re.escape(core) + tail)


def term_in(term: str, normalized_text: str) -> bool:
    return _term_pattern(term).search(normalized_text) is not None


@dataclass(frozen=True)
class Rule:
    all: tuple[tuple[str, ...], ...]
    none: tuple[str, ...] = ()

    def matches(self, normalized_text: str) -> bool:
        present = all(any(term_in(t, normalized_text) for t in g) for g in self.all)
        return present and not any(term_in(t, normalized_text) for t in self.none)


@dataclass(frozen=True)
class Item:
    id: str
    category: str
    weight: str
    statement: str
    rules: tuple[Rule, ...]

    def matches(self, text: str) -> bool:
        normalized = normalize(text)
        return any(rule.matches(normalized) for rule in self.rules)


@dataclass(frozen=True)
class SessionLabels:
    session: str
    sample: str
    project: str
    items: tuple[Item, ...]


@dataclass(frozen=True)
class JunkPattern:
    id: str
    kind: str
    regex: re.Pattern[str]
    scope: str = "all"  # "payload": noise only in the SessionStart payload


class LabelError(ValueError):
    """A label file does not follow the schema in the README."""


def _rule(raw: object, where: str) -> Rule:
    if not isinstance(raw, dict) or set(raw) - {"all", "none"} or "all" not in raw:
        raise LabelError(f"{where}: a rule is {{ all = [[terms…], …], none = [terms…] }}")
    groups = raw["all"]
    if not groups or not all(isinstance(g, list) and g for g in groups):
        raise LabelError(f"{where}: 'all' must be a non-empty list of non-empty term lists")
    terms = [t for g in groups for t in g] + list(raw.get("none", []))
    if not all(isinstance(t, str) and t.rstrip("*").strip() for t in terms):
        raise LabelError(f"{where}: every term must be a non-empty string")
    if any("*" in t.rstrip("*") for t in terms):
        raise LabelError(f"{where}: '*' may only end a term")
    return Rule(tuple(tuple(g) for g in groups), tuple(raw.get("none", [])))


def parse_rules(raw: object, where: str = "rules") -> tuple[Rule, ...]:
    """An item's ``rule`` list as read from TOML."""
    if not isinstance(raw, list) or not raw:
        raise LabelError(f"{where}: no rule")
    return tuple(_rule(r, f"{where} rule {i}") for i, r in enumerate(raw))


def _item(raw: dict, where: str) -> Item:
    required = {"id", "category", "weight", "statement", "evidence", "rule"}
    if missing := required - set(raw):
        raise LabelError(f"{where}: missing {sorted(missing)}")
    if raw["category"] not in CATEGORIES:
        raise LabelError(f"{where}: unknown category {raw['category']!r}")
    if raw["weight"] not in WEIGHTS:
        raise LabelError(f"{where}: weight must be one of {sorted(WEIGHTS)}")
    rules = parse_rules(raw["rule"], where)
    return Item(raw["id"], raw["category"], raw["weight"], raw["statement"], rules)


def load_session(path: Path) -> SessionLabels:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    for key in ("session", "sample", "project", "item"):
        if key not in data:
            raise LabelError(f"{path.name}: missing {key!r}")
    if path.stem != data["session"]:
        raise LabelError(f"{path.name}: file name and session id differ")
    items = tuple(_item(raw, f"{path.name} item {i}") for i, raw in enumerate(data["item"]))
    return SessionLabels(data["session"], data["sample"], data["project"], items)


NOT_SESSIONS = frozenset({"junk.toml", "queries.toml"})


def load_all(folder: Path = LABELS) -> list[SessionLabels]:
    sessions = [
        load_session(p) for p in sorted(folder.glob("*.toml")) if p.name not in NOT_SESSIONS
    ]
    ids = [item.id for s in sessions for item in s.items]
    if len(ids) != len(set(ids)):
        raise LabelError(f"duplicate item ids: {sorted({i for i in ids if ids.count(i) > 1})}")
    return sessions


@dataclass(frozen=True)
class Query:
    """A teammate's question (``inject --query``) and the label items that answer it."""

    project: str
    text: str
    want: tuple[str, ...]


def load_queries(folder: Path = LABELS, sessions: list[SessionLabels] | None = None) -> list[Query]:
    """The labelled queries; each names a labelled project and items of that project."""
    data = tomllib.loads((folder / "queries.toml").read_text(encoding="utf-8"))
    known = {s.project: {i.id for i in s.items} for s in (sessions or load_all(folder))}
    queries = []
    for n, raw in enumerate(data["query"]):
        query = Query(raw["project"], raw["text"], tuple(raw["want"]))
        if query.project not in known or not set(query.want) <= known[query.project]:
            raise LabelError(f"query {n} ({query.text!r}): unknown project or item")
        queries.append(query)
    return queries


def load_junk(folder: Path = LABELS) -> list[JunkPattern]:
    data = tomllib.loads((folder / "junk.toml").read_text(encoding="utf-8"))
    patterns = []
    for raw in data["pattern"]:
        scope = raw.get("scope", "all")
        if scope not in JUNK_SCOPES:
            raise LabelError(f"junk pattern {raw.get('id')}: scope must be one of {JUNK_SCOPES}")
        regex = re.compile(raw["regex"], re.IGNORECASE)
        patterns.append(JunkPattern(raw["id"], raw["kind"], regex, scope))
    return patterns


def junk_kind(text: str, patterns: list[JunkPattern], *, payload: bool = False) -> str | None:
    """The id of the first junk pattern the text shows, or None. Patterns scoped to the
    payload only count when ``payload`` is true."""
    plain = html.unescape(text)
    return next(
        (p.id for p in patterns if (payload or p.scope == "all") and p.regex.search(plain)), None
    )


def payload_units(payload: str) -> list[str]:
    """The payload's items, each matched on its own: the terms of one rule must come from one
    remembered item, not from two unrelated lines that happen to sit in the same payload."""
    elements = [m.group(2) for m in _ELEMENT.finditer(payload)]
    return elements or [line for line in payload.splitlines() if line.strip()]
