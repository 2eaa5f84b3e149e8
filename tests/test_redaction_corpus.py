"""Redaction on the public-scanner corpus (tests/fixtures/redaction/, issue 16) and on hostile
sizes (issue 10).

The thresholds are what the rules reached when this test was written (bench/redaction.py prints
the per-kind table): recall 0.995 on 185 secrets, false positives 0.36 % on 278 benign strings.
The asserted floors sit just under those figures, so a rule change that loses a secret or starts
touching developer text fails here. Speed is not asserted (bench/redaction.py times each input).
"""

from __future__ import annotations

import json
import random
import re
import string

import pytest

from memoryd.core.redaction import marker, redact
from redaction_corpus import CORPUS, evaluate, load

MIN_RECALL = 0.99
MAX_FALSE_POSITIVES = 0.005


def test_the_corpus_reaches_the_recall_and_false_positive_floors() -> None:
    result = evaluate(lambda text: redact(text).text, load())
    assert result.secrets >= 180 and result.benign >= 270
    misses = [e for t in result.recall.values() for e in t.examples]
    changed = [e for t in result.false_positives.values() for e in t.examples]
    assert result.overall_recall >= MIN_RECALL, misses
    assert result.overall_fp_rate <= MAX_FALSE_POSITIVES, changed


def test_every_item_says_where_it_came_from() -> None:
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        assert item["licence"] == "MIT", item["id"]
        assert item["source"] in {"gitleaks/gitleaks", "memoryd"}, item["id"]
        if item["source"] == "gitleaks/gitleaks":
            assert item["path"].startswith("cmd/generate/config/"), item["id"]
            assert re.fullmatch(r"[0-9a-f]{40}", item["commit"]), item["id"]
        assert (item["label"] == "secret") == bool(item["secrets"]), item["id"]


KB256 = 256 * 1024


def fill(unit: str) -> str:
    return (unit * (KB256 // len(unit) + 1))[:KB256]


# One hostile input per rule family, each with the output it must give. Issue 10: the e-mail
# rule took 129 s on such a line before its parts were bounded.
UNCHANGED = {
    "email a@": fill("a@"),
    "email a.a@": fill("a.a@"),
    "email local run": fill("a") + "@",
    "email domain labels": "x@" + fill("a-"),
    "one letter run": fill("A"),
    "password: x": fill("password: x "),
    "curl -u": "curl " + fill("-u a:"),
    "kubernetes data:": "kind: Secret\n" + fill("data:\n a: "),
    "slack xoxb-1-": fill("xoxb-1-"),
    "url @": "https://" + fill("a@b"),
}


@pytest.mark.parametrize("name", sorted(UNCHANGED))
def test_a_hostile_256_kb_input_is_kept_as_it_is(name: str) -> None:
    assert redact(UNCHANGED[name]).text == UNCHANGED[name]


def test_a_256_kb_run_of_random_base64_is_one_secret() -> None:
    rng = random.Random(16)
    run = "".join(rng.choice(string.ascii_letters + string.digits + "+/") for _ in range(KB256))
    assert redact(run).text == marker("high_entropy")


def test_an_unterminated_256_kb_private_key_is_redacted_to_the_end() -> None:
    text = "key:\n-----BEGIN PRIVATE KEY-----\n" + fill("A")
    assert redact(text).text == "key:\n" + marker("private_key")
