"""The redaction corpus (tests/fixtures/redaction/) and its two measures, shared by
tests/test_redaction_corpus.py and bench/redaction.py.

- recall: a secret item counts as caught when none of its values survives redaction; a value
  survives when it is still there whole, or, for a value of 16 characters or more, a run of half
  its length is (a redaction that keeps half a token has not removed it);
- false positives: a benign item counts when redaction changes it at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

CORPUS = Path(__file__).parent / "fixtures" / "redaction" / "corpus.jsonl"


@dataclass(frozen=True)
class Item:
    id: str
    label: str  # "secret" or "benign"
    kind: str
    text: str
    secrets: tuple[str, ...]


def load(path: Path = CORPUS) -> list[Item]:
    items = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        items.append(Item(row["id"], row["label"], row["kind"], row["text"], tuple(row["secrets"])))
    return items


def survives(value: str, text: str) -> bool:
    if value in text:
        return True
    if len(value) < 16:
        return False
    width = len(value) // 2
    return any(value[i : i + width] in text for i in range(len(value) - width + 1))


@dataclass
class Tally:
    total: int = 0
    bad: int = 0  # secrets missed, or benign strings changed
    examples: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.bad / self.total if self.total else 0.0


@dataclass
class Result:
    recall: dict[str, Tally]  # per kind; rate = misses / secrets
    false_positives: dict[str, Tally]

    @staticmethod
    def _sum(tallies: dict[str, Tally]) -> Tally:
        return Tally(sum(t.total for t in tallies.values()), sum(t.bad for t in tallies.values()))

    @property
    def overall_recall(self) -> float:
        return 1 - self._sum(self.recall).rate

    @property
    def overall_fp_rate(self) -> float:
        return self._sum(self.false_positives).rate

    @property
    def secrets(self) -> int:
        return self._sum(self.recall).total

    @property
    def benign(self) -> int:
        return self._sum(self.false_positives).total


def evaluate(redact: Callable[[str], str], items: list[Item]) -> Result:
    result = Result({}, {})
    for item in items:
        out = redact(item.text)
        if item.label == "secret":
            tally = result.recall.setdefault(item.kind, Tally())
            bad = any(survives(value, out) for value in item.secrets)
        else:
            tally = result.false_positives.setdefault(item.kind, Tally())
            bad = out != item.text
        tally.total += 1
        if bad:
            tally.bad += 1
            tally.examples.append(f"{item.id}: {out[:160]!r}")
    return result
