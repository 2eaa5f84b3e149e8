"""Reads served by reader threads (issue 12) against the real daemon: every acknowledged write is
seen by the next read of any client, however busy the readers are, and what a read leaves for
the owner thread (access counts) arrives. ``server.readers`` 0 serves reads on the owner thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import msgspec
import pytest

from conftest import Daemon, Env
from memctl import protocol as p
from memctl.transport import Client

# Words no two of which are a typo or a prefix apart (search matches those too).
WORDS = ("zebu", "okapi", "tapir", "quoll", "numbat", "dugong", "kakapo", "gharial")
BUSY_CLIENTS = 3


def _call(client: Client, request: p.Request) -> dict:
    reply = client.call(request, budget_s=30)
    assert isinstance(reply, p.Ok), reply
    return msgspec.to_builtins(p.result_of(request, reply))


@pytest.fixture(params=[0, 3], ids=["owner-thread", "3-readers"])
def served(env: Env, request: pytest.FixtureRequest) -> Iterator[Env]:
    daemon = Daemon(env, {"MEMORYD_SERVER__READERS": str(request.param)}).start()
    yield env
    daemon.stop()


def test_a_read_from_another_client_sees_every_acknowledged_write(served: Env) -> None:
    env, project = served, str(served.project)
    endpoint = f"ipc://{env.socket}"
    stop = threading.Event()
    busy_failures: list[object] = []

    def keep_readers_busy(n: int) -> None:
        with Client(endpoint=endpoint) as client:
            while not stop.is_set():
                reply = client.call(p.Inject(project=project, query=f"ledger {n}"), budget_s=30)
                if not isinstance(reply, p.Ok):
                    busy_failures.append(reply)
                    return

    busy = [threading.Thread(target=keep_readers_busy, args=(n,)) for n in range(BUSY_CLIENTS)]
    for thread in busy:
        thread.start()
    ids = []
    try:
        with Client(endpoint=endpoint) as writer, Client(endpoint=endpoint) as reader:
            for word in WORDS:
                fact = f"The ledger shard is rebalanced by the {word} job"
                ids.append(_call(writer, p.Remember(project=project, content=fact))["id"])
                injected = _call(reader, p.Inject(project=project, query=f"{word} ledger"))
                assert ids[-1] in injected["entries"], (word, injected)
                found = _call(reader, p.Search(project=project, query=word))
                assert [r["id"] for r in found["results"]] == [ids[-1]]
            # A hook: its remember on the owner thread, its payload on a reader, which leaves
            # out what the prompt just asked to keep and brings what memory held before.
            prompt = "remember: the okapi ledger job pages the on-call person"
            hooked = _call(
                reader,
                p.Hook(project=project, agent="claude", event="prompt", prompt=prompt),
            )
            [kept] = hooked["remembered"]
            assert ids[1] in hooked["entries"] and kept not in hooked["entries"], hooked
            again = _call(writer, p.Inject(project=project, query="okapi on-call person"))
            assert kept in again["entries"], again
            _call(writer, p.Forget(project=project, target=ids[0], confirm=True))
            assert _call(reader, p.Search(project=project, query=WORDS[0]))["results"] == []
    finally:
        stop.set()
        for thread in busy:
            thread.join(timeout=60)
    assert not busy_failures
    # Each inject above counted as an access: the owner applied what the reader left.
    with Client(endpoint=endpoint) as client:
        listed = _call(client, p.ListEntries(project=project, limit=100))["entries"]
    counts = {e["id"]: e["access_count"] for e in listed}
    assert set(counts) == {*ids[1:], kept}
    assert all(counts[i] >= 1 for i in ids[1:]), counts
