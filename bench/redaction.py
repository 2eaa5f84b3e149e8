"""Benchmark: redaction recall and false positives on tests/fixtures/redaction/corpus.jsonl, per
kind and overall, throughput, and the time each adversarial 256 KB input takes, for the working
tree's rules and for a baseline (``core/redaction.py`` as of a git ref, default ``main``) in the
same run. Design target (issue 16): recall ≥ 0.95, false positives ≤ 1 %.

    .venv/bin/python bench/redaction.py [--baseline main|none] [--misses] [--adversarial-timeout 20]
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing as mp
import random
import statistics
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.redaction_corpus import Item, Result, evaluate, load  # noqa: E402

MODULE = "daemon/memoryd/core/redaction.py"
KB256 = 256 * 1024
RUNS = 5


def load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def baseline_path(ref: str, into: Path) -> Path:
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:{MODULE}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = into / "redaction_baseline.py"
    path.write_text(source, encoding="utf-8")
    return path


def adversarial() -> dict[str, str]:
    """One input per rule family, each 256 KB, built to make a backtracking pattern quadratic."""
    rng = random.Random(16)
    b64 = string.ascii_letters + string.digits + "+/"

    def fill(unit: str) -> str:
        return (unit * (KB256 // len(unit) + 1))[:KB256]

    return {
        "email a@": fill("a@"),
        "email a.a@": fill("a.a@"),
        "email local run": fill("a") + "@",
        "domain labels": "x@" + fill("a-"),
        "base64 run": "".join(rng.choice(b64) for _ in range(KB256)),
        "one letter run": fill("A"),
        "password=": fill("password="),
        "password: x ": fill("password: x "),
        "api_key=": fill("api_key="),
        "authorization": fill("Authorization: Bearer "),
        "curl -u": "curl " + fill("-u a:"),
        "connection ://a:": fill("://a:"),
        "private key unterminated": "-----BEGIN PRIVATE KEY-----\n" + fill("A"),
        "BEGIN repeated": fill("-----BEGIN "),
        "kubernetes data:": "kind: Secret\n" + fill("data:\n a: "),
        "slack xoxb-1-": fill("xoxb-1-"),
        "hooks.slack.com": fill("hooks.slack.com/services/"),
        "url @": "https://" + fill("a@b"),
        "random printable": "".join(rng.choice(string.printable) for _ in range(KB256)),
    }


def _time_one(path: str, name: str, text: str, queue: mp.Queue) -> None:  # type: ignore[type-arg]
    module = load_module(Path(path), "redaction_under_test")
    start = time.perf_counter()
    module.redact(text)
    queue.put(time.perf_counter() - start)


def time_adversarial(path: Path, timeout: float) -> dict[str, float | None]:
    """Seconds per input, each in a child process; None when it ran past ``timeout``."""
    out: dict[str, float | None] = {}
    ctx = mp.get_context("fork")
    for name, text in adversarial().items():
        queue: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
        child = ctx.Process(target=_time_one, args=(str(path), name, text, queue))
        child.start()
        child.join(timeout)
        if child.is_alive():
            child.kill()
            child.join()
            out[name] = None
        else:
            out[name] = queue.get()
    return out


def sources() -> list[str]:
    """Ordinary developer text with few secrets: this repository's Python sources, one file a
    string (~1 MB)."""
    paths = sorted((ROOT / "daemon").rglob("*.py")) + sorted((ROOT / "client").rglob("*.py"))
    return [p.read_text(encoding="utf-8") for p in paths]


def throughput(redact: Callable[[str], str], items: list[Item]) -> tuple[float, float, float]:
    """MB/s: (a) each corpus string on its own, as the daemon redacts entries; (b) one ~1 MB
    document of the corpus lines (every rule's hint present: the worst case); (c) the
    repository's own sources, a file at a time. Median of RUNS."""
    texts = [item.text for item in items]
    doc = "\n".join(texts * (1_000_000 // max(1, sum(map(len, texts))) + 1))
    cases = (texts, [doc], sources())
    rates: list[list[float]] = [[], [], []]
    for _ in range(RUNS):
        for rate, case in zip(rates, cases, strict=True):
            size = sum(len(t.encode()) for t in case) / 1e6
            start = time.perf_counter()
            for text in case:
                redact(text)
            rate.append(size / (time.perf_counter() - start))
    a, b, c = (statistics.median(r) for r in rates)
    return a, b, c


def table(results: dict[str, Result], misses: bool) -> None:
    names = list(results)
    head = " ".join(f"{n:>18}" for n in names)
    for section, attr, what in (
        ("recall per kind (caught/secrets)", "recall", "secret"),
        ("false positives per kind (changed/benign)", "false_positives", "benign"),
    ):
        print(f"\n## {section}\n{'kind':<28} {head}")
        kinds = sorted({k for r in results.values() for k in getattr(r, attr)})
        for kind in kinds:
            cells = []
            for name in names:
                tally = getattr(results[name], attr)[kind]
                good = tally.total - tally.bad if what == "secret" else tally.bad
                value = 1 - tally.rate if what == "secret" else tally.rate
                cells.append(f"{good:>3}/{tally.total:<3} {value:>8.3f}")
            print(f"{kind:<28} " + " ".join(f"{c:>18}" for c in cells))
    print(f"\n## overall\n{'':<28} {head}")
    print(
        f"{'secrets / benign':<28} "
        + " ".join(f"{f'{r.secrets} / {r.benign}':>18}" for r in results.values())
    )
    print(f"{'recall':<28} " + " ".join(f"{r.overall_recall:>18.3f}" for r in results.values()))
    print(
        f"{'false positives':<28} "
        + " ".join(f"{r.overall_fp_rate:>18.2%}" for r in results.values())
    )
    if misses:
        for name, result in results.items():
            print(f"\n## {name}: misses and false positives")
            for group in (result.recall, result.false_positives):
                for kind, tally in sorted(group.items()):
                    for example in tally.examples:
                        print(f"  [{kind}] {example}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="main", help="git ref, or 'none'")
    parser.add_argument("--misses", action="store_true", help="list every miss and change")
    parser.add_argument("--adversarial-timeout", type=float, default=20.0)
    args = parser.parse_args()

    items = load()
    modules = {"current": ROOT / MODULE}
    with tempfile.TemporaryDirectory() as tmp:
        if args.baseline != "none":
            modules = {
                f"baseline {args.baseline}": baseline_path(args.baseline, Path(tmp)),
                **modules,
            }
        loaded = {
            name: load_module(path, f"redaction_{i}")
            for i, (name, path) in enumerate(modules.items())
        }
        results = {
            name: evaluate(lambda t, m=m: m.redact(t).text, items) for name, m in loaded.items()
        }
        table(results, args.misses)

        print(
            f"\n## throughput (MB/s, median of {RUNS})\n{'':<28} "
            + " ".join(f"{n:>18}" for n in loaded)
        )
        speeds = {
            name: throughput(lambda t, m=m: m.redact(t).text, items) for name, m in loaded.items()
        }
        print(f"{'per corpus string':<28} " + " ".join(f"{s[0]:>18.2f}" for s in speeds.values()))
        print(f"{'one ~1 MB document':<28} " + " ".join(f"{s[1]:>18.2f}" for s in speeds.values()))
        print(f"{'repository sources':<28} " + " ".join(f"{s[2]:>18.2f}" for s in speeds.values()))

        print(
            f"\n## adversarial 256 KB inputs (seconds; '>' = killed at "
            f"{args.adversarial_timeout:g} s)\n{'input':<28} "
            + " ".join(f"{n:>18}" for n in modules)
        )
        timings = {
            name: time_adversarial(path, args.adversarial_timeout) for name, path in modules.items()
        }
        for input_name in adversarial():
            cells = []
            for name in modules:
                seconds = timings[name][input_name]
                cells.append(
                    f"> {args.adversarial_timeout:g}" if seconds is None else f"{seconds:.3f}"
                )
            print(f"{input_name:<28} " + " ".join(f"{c:>18}" for c in cells))


if __name__ == "__main__":
    main()
