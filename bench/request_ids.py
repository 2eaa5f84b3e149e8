"""Benchmark: what remembering request ids durably costs a change (issue 10).

The same daemon, the same kind of request (``remember`` of new content), two ways, interleaved:
with a unique request id (32 hex digits, as memctl sends: the store records what it did in the
change's transaction, and the reply before it is sent) and with a short counter id (taken as
not unique: nothing is recorded, the baseline). Then a retry of each unique request (answered
from the store: a ``requests`` row read). Runs against a real daemon on a private socket with
private XDG dirs, as tests/conftest.py does.

    .venv/bin/python bench/request_ids.py [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import Daemon, make_env

from memctl import protocol
from memctl.transport import Client


def _timed(client: Client, request: protocol.Request) -> float:
    t0 = time.perf_counter()
    reply = client.call(request)
    took = time.perf_counter() - t0
    assert isinstance(reply, protocol.Ok), reply
    return took


def _row(name: str, values: list[float], base: float) -> dict[str, object]:
    ordered = sorted(values)
    median = statistics.median(ordered)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return {"case": name, "median_ms": median * 1000, "p95_ms": p95 * 1000, "x": median / base}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="requests per case (default 200)")
    parser.add_argument("--json", action="store_true", help="one JSON object, not a table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = make_env(Path(tmp))
        daemon = Daemon(env).start()
        try:
            project = str(env.project)
            unique: list[float] = []
            counter: list[float] = []
            sent: list[protocol.Request] = []
            with Client(endpoint="ipc://" + str(env.socket), budget_s=10.0) as client:
                for n in range(args.runs + 5):
                    u = protocol.Remember(content=f"bench unique {n} {uuid.uuid4().hex}")
                    u.id, u.project = uuid.uuid4().hex, project
                    c = protocol.Remember(content=f"bench counter {n} {uuid.uuid4().hex}")
                    c.id, c.project = str(n), project
                    tu, tc = _timed(client, u), _timed(client, c)
                    if n >= 5:  # warm-up left out
                        unique.append(tu)
                        counter.append(tc)
                        sent.append(u)
            # A new client and daemon: the retries are answered from the store, not the
            # in-memory cache.
            daemon.stop()
            daemon = Daemon(env).start()
            with Client(endpoint="ipc://" + str(env.socket), budget_s=10.0) as client:
                retried = [_timed(client, u) for u in sent]
        finally:
            daemon.stop()
    base = statistics.median(counter)
    rows = [
        _row("remember, counter id (baseline)", counter, base),
        _row("remember, unique id (recorded)", unique, base),
        _row("retry after restart (from store)", retried, base),
    ]
    if args.json:
        print(json.dumps({"runs": args.runs, "rows": rows}))
        return
    print(f"{'case':36} {'median ms':>10} {'p95 ms':>8} {'x base':>7}   ({args.runs} each)")
    for r in rows:
        print(f"{r['case']:36} {r['median_ms']:10.2f} {r['p95_ms']:8.2f} {r['x']:7.2f}")


if __name__ == "__main__":
    main()
