"""Benchmark: how long a probe client waits for ``status`` while another client sends each hostile
size of issue 10 (acceptance 2: the probe answered within 0.5 s every time).

Attacks, one after another on one daemon: a 256 KB remember, a 256 KB import line, an import
request of the most lines one may carry, a 5 MB and a
50 MB transcript appended to a watched transcript (timed until ``status`` counts all its
messages read), a bank update with 2,000 ``##`` sections, one with 2,000 history items holding
fenced code, a 256 KB hook prompt. A probe thread sends
``status`` back to back, each on a fresh connection as memctl does, from the attack's start to
its end; the table gives per attack the attack's own duration and the probe's p50, p99 and max,
with a quiet row (no attack, same duration as the longest attack up to 5 s) as the baseline
measured in the same run. No asserts: it prints.

    .venv/bin/python bench/hostile.py [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import string
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import Daemon, Env, make_env, ok_json

from memctl import protocol
from memctl.transport import Client

KB = 1024
SESSION = "5f0c2a9e-1d2b-4c3d-8e4f-a1b2c3d4e5f6"


def _call(env: Env, request: protocol.Request[Any], budget_s: float = 600) -> protocol.Reply:
    with Client(endpoint="ipc://" + str(env.socket)) as client:
        return client.call(request, budget_s=budget_s)


def _words(n_chars: int, seed: int) -> str:
    rnd = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < n_chars:
        word = "".join(rnd.choice(string.ascii_lowercase) for _ in range(rnd.randint(3, 10)))
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:n_chars]


def remember_256k(env: Env) -> None:
    _call(env, protocol.Remember(content=_words(256 * KB, 1), project=str(env.project)))


def import_line_256k(env: Env) -> None:
    line = json.dumps({"content": _words(256 * KB, 2)})
    _call(env, protocol.Import(lines=[line], project=str(env.project)))


def import_request_max(env: Env) -> None:
    """The most lines one Import request may carry (one event, applied whole)."""
    lines = [
        json.dumps({"content": f"imported fact {i} about component {i % 97}: {_words(60, i)}"})
        for i in range(protocol.IMPORT_MAX_LINES)
    ]
    _call(env, protocol.Import(lines=lines, project=str(env.project)))


def transcript_5mb(env: Env) -> None:
    _transcript(env, 5, SESSION)


def transcript_50mb(env: Env) -> None:
    _transcript(env, 50, str(uuid.UUID(int=int(SESSION.replace("-", ""), 16) + 1)))


def _transcript(env: Env, mb: int, session: str) -> None:
    folder = env.home / ".claude/projects" / ("-" + str(env.project).strip("/").replace("/", "-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session}.jsonl"
    text = _words(2 * KB, 3)
    before = _messages(env)
    with open(path, "a", encoding="utf-8") as fh:
        n, size = 0, 0
        while size < mb * KB * KB:
            role = "user" if n % 2 == 0 else "assistant"
            content: Any = text if role == "user" else [{"type": "text", "text": text}]
            record = {
                "type": role,
                "sessionId": session,
                "cwd": str(env.project),
                "uuid": f"u{n}",
                "timestamp": "2026-11-21T10:00:00Z",
                "message": {"role": role, "content": content},
            }
            line = json.dumps(record) + "\n"
            fh.write(line)
            size += len(line)
            n += 1
    # Until the daemon has read every message of it (each poll a real round trip).
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and _messages(env) < before + n:
        pass


def _messages(env: Env) -> int:
    request = protocol.StatusRequest(project=str(env.project))
    reply = _call(env, request)
    assert isinstance(reply, protocol.Ok), reply
    return protocol.result_of(request, reply).capture.messages


def bank_2000_sections(env: Env) -> None:
    content = "".join(f"## Section {i}\n\nThe part {i} of the system.\n\n" for i in range(2000))
    request = protocol.BankUpdate(
        id=uuid.uuid4().hex, project=str(env.project), name="techContext.md", content=content
    )
    _call(env, request)


def bank_2000_fenced_items(env: Env) -> None:
    items = "".join(f"- change {i}\n  ```\n  code {i}\n  ```\n" for i in range(2000))
    request = protocol.BankUpdate(
        id=uuid.uuid4().hex,
        project=str(env.project),
        name="activeContext.md",
        content="## Recent Changes\n\n" + items,
    )
    _call(env, request)


def hook_prompt_256k(env: Env) -> None:
    prompt = _words(262_144, 4)
    _call(
        env, protocol.Hook(agent="claude", event="prompt", project=str(env.project), prompt=prompt)
    )


ATTACKS: list[tuple[str, Callable[[Env], None]]] = [
    ("remember 256 KB", remember_256k),
    ("import line 256 KB", import_line_256k),
    (f"import {protocol.IMPORT_MAX_LINES} lines", import_request_max),
    ("transcript 5 MB", transcript_5mb),
    ("transcript 50 MB", transcript_50mb),
    ("bank update 2,000 ##", bank_2000_sections),
    ("bank update 2,000 ```", bank_2000_fenced_items),
    ("hook prompt 256 KB", hook_prompt_256k),
]


def probed(env: Env, attack: Callable[[Env], None]) -> tuple[float, list[float]]:
    """The attack's duration and the probe's round trips (s) while it ran."""
    done = threading.Event()
    times: list[float] = []

    def probe() -> None:
        with Client(endpoint="ipc://" + str(env.socket)) as client:
            while not done.is_set():
                started = time.perf_counter()
                client.call(protocol.StatusRequest(), budget_s=600)
                times.append(time.perf_counter() - started)

    thread = threading.Thread(target=probe)
    thread.start()
    started = time.perf_counter()
    try:
        attack(env)
    finally:
        took = time.perf_counter() - started
        done.set()
        thread.join()
    return took, times


def _p99(times: list[float]) -> float:
    if len(times) < 2:
        return max(times, default=0.0)
    return statistics.quantiles(times, n=100, method="inclusive")[98]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--attack", help="run only the attacks whose name contains this")
    args = parser.parse_args()
    attacks = [(n, a) for n, a in ATTACKS if args.attack is None or args.attack in n]
    import tempfile

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        env = make_env(Path(tmp))
        daemon = Daemon(env).start()
        try:
            for i in range(50):
                ok_json(env, "remember", f"Service {i} deploys through the staging cluster")
            ok_json(env, "bank", "init")
            longest = 0.0
            for name, attack in attacks:
                took, times = probed(env, attack)
                longest = max(longest, took)
                rows.append({"attack": name, "attack_s": took, "probe": times})
            quiet = min(max(longest, 1.0), 5.0)
            rows.insert(
                0,
                {
                    "attack": "(quiet: no attack)",
                    "attack_s": quiet,
                    "probe": probed(env, lambda _env: time.sleep(quiet))[1],
                },
            )
        finally:
            daemon.stop()
    table = [
        {
            "attack": r["attack"],
            "attack_s": round(r["attack_s"], 3),
            "probes": len(r["probe"]),
            "probe_p50_ms": round(statistics.median(r["probe"]) * 1000, 1) if r["probe"] else None,
            "probe_p99_ms": round(_p99(r["probe"]) * 1000, 1),
            "probe_max_ms": round(max(r["probe"], default=0.0) * 1000, 1),
        }
        for r in rows
    ]
    if args.json:
        print(json.dumps(table, indent=2))
        return
    print(f"{'attack':<22} {'attack s':>9} {'probes':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for t in table:
        print(
            f"{t['attack']:<22} {t['attack_s']:>9.3f} {t['probes']:>7} "
            f"{t['probe_p50_ms'] or 0:>8.1f} {t['probe_p99_ms']:>8.1f} {t['probe_max_ms']:>8.1f}"
        )


if __name__ == "__main__":
    main()
