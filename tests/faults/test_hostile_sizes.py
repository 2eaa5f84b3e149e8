"""Hostile sizes (issue 10, problem 4 and the hook prompt of problem 5): sizes are checked before
any expensive work, and what the daemon does with the largest input it takes is bounded."""

from __future__ import annotations

import base64
import json
import random
import re
import string
import uuid
from pathlib import Path

from conftest import Daemon, Env, ok_json
from memctl import protocol
from memctl.transport import Client

# Redaction turns it into "[REDACTED:private_key]": 729 characters sent, 40 after redaction.
KEY = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    + "\n".join(base64.b64encode(bytes(range(n, n + 48))).decode() for n in range(10))
    + "\n-----END RSA PRIVATE KEY-----"
)
LONG = "The deploy key is " + KEY


def _call(env: Env, request: protocol.Request) -> protocol.Reply:  # type: ignore[type-arg]
    with Client(endpoint="ipc://" + str(env.socket)) as client:
        return client.call(request, budget_s=60)


def _too_large(reply: protocol.Reply, message: str) -> None:
    assert isinstance(reply, protocol.Error), reply
    assert reply.code == "too_large" and message in reply.message, reply


def test_sizes_are_checked_before_redaction(env: Env, daemon: Daemon) -> None:
    """Proves that the size limits hold for what was sent, so they can be (and are) checked
    before redaction: a 729-character remember, import line, supersede and note are refused
    with the limit's clear error even though redaction would cut them to 40 characters, and a
    bank write or update of more than 512 KiB is refused before anything is done with it even
    when redaction would bring it under; nothing is kept. On main content was redacted first
    and its size checked after: all six were accepted (the import cost of a 256 KB line was
    its redaction, with every client waiting)."""
    project = str(env.project)
    too_long = f"content is {len(LONG)} characters; the limit is 500"
    kept = ok_json(env, "remember", "Deploys go through the staging cluster first")["id"]
    _too_large(_call(env, protocol.Remember(content=LONG, project=project)), too_long)
    _too_large(_call(env, protocol.Supersede(target=kept, content=LONG, project=project)), too_long)
    _too_large(_call(env, protocol.NoteAdd(content=LONG, project=project)), too_long)
    reply = _call(env, protocol.Import(lines=[json.dumps({"content": LONG})], project=project))
    assert isinstance(reply, protocol.Ok), reply
    result = protocol.result_of(protocol.Import(lines=[]), reply)
    assert result.imported == 0
    assert [(r.line, r.reason) for r in result.rejected] == [
        (1, f"{too_long}. Split it into smaller entries.")
    ]
    assert [e["id"] for e in ok_json(env, "list")["entries"]] == [kept]
    assert ok_json(env, "notes")["notes"] == []

    ok_json(env, "bank", "init")
    # 250,000 two-byte characters and 60 keys: 542,731 bytes sent, ~501,400 after redaction.
    big = "## Notes\n\n" + "é" * 250_000 + "\n" + "\n".join([KEY] * 60) + "\n"
    size = len(big.encode())
    for request in (
        protocol.BankWrite(id=uuid.uuid4().hex, project=project, name="notes.md", content=big),
        protocol.BankUpdate(
            id=uuid.uuid4().hex, project=project, name="techContext.md", content=big
        ),
    ):
        _too_large(_call(env, request), f"{size} bytes is more than the 524288 allowed")
    assert not (env.project / "memory-bank" / "notes.md").exists()
    assert "é" not in (env.project / "memory-bank" / "techContext.md").read_text()


def _peak_rss_mb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) // 1024  # type: ignore[union-attr]


def test_a_256_kb_hook_prompt_is_bounded_work(env: Env, daemon: Daemon) -> None:
    """Proves that the largest prompt a hook sends (262,144 characters, ~35,000 distinct words)
    costs the daemon a bounded amount: its peak memory grows by less than 200 MB, the memory
    the prompt's first words are about is still injected, and the daemon answers a status
    after it. On main every distinct word became a term and a fuzzy query in the index: peak
    memory grew by 2.2 GB (and the owner thread was held 5 s)."""
    assert daemon.proc is not None
    ok_json(env, "remember", "The ledger service runs on Postgres 15")
    rnd = random.Random(7)
    words = (
        "".join(rnd.choice(string.ascii_lowercase) for _ in range(rnd.randint(4, 12)))
        for _ in range(40_000)
    )
    prompt = ("which postgres does the ledger service use? " + " ".join(words))[:262_144]
    before = _peak_rss_mb(daemon.proc.pid)
    request = protocol.Hook(agent="claude", event="prompt", project=str(env.project), prompt=prompt)
    reply = _call(env, request)
    assert isinstance(reply, protocol.Ok), reply
    assert "The ledger service runs on Postgres 15" in protocol.result_of(request, reply).text
    assert _peak_rss_mb(daemon.proc.pid) - before < 200
    assert ok_json(env, "status")["daemon"]["pid"] == daemon.proc.pid
