"""Benchmark: retrieval at 3,000, 30,000 and 300,000 entries against the design §13 targets.

Per size, a seeded synthetic project is imported into a real daemon (private XDG dirs and socket,
as in tests/conftest.py); then: index build time (catch-up after the import, rebuild from SQLite),
``inject``/``search`` latency server-side (the ``ms`` of the daemon's request log lines) and over
the socket (a memctl Client: a new DEALER per call, as a hook does), ``inject``/s from 8 client
processes, daemon RSS (the most of any run; "restart" = a plain restart that served the latency
phase), and time to serve after a restart. Progress on stderr, table on stdout.

A project's opening starts a compaction run, and after this import (backdated up to a year) it
archives most of the corpus (27,000 of 30,000): figures marked "compacting" are taken while it
runs (right after a restart; the rebuild's throughput), the others once it has ended (server
latency after a ``compact`` request waited for it; inject/s: the sweep's 8 clients, owner
thread).

Then ``inject``/s from 1, 2, 4 and 8 client processes with the reads served on the owner thread
(``server.readers`` 0, the default) and by reader threads (2), the daemons taking turns for
``--rounds`` rounds: medians, and each one's ratio to the owner-thread figure of its own round.
``--sweep-only`` runs the import and this sweep alone.

    .venv/bin/python bench/retrieval.py [--sizes 3000,30000,300000] [--quick] [--json]
        [--sweep-only] [--clients 1,2,4,8] [--readers 0,2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import itertools
import json
import math
import multiprocessing as mp
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import zmq

# Reuse the test harness rather than re-deriving the env layout and the daemon start.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import Daemon, Env, make_env

import memoryd
from memctl import protocol as p
from memctl.transport import Client, DaemonUnavailable

SEED, WARMUP, CLIENTS, READY_RUNS = 20240611, 10, 8, 3
CHUNK_BYTES = 3 * 1024 * 1024  # per Import request, under the 4 MiB frame limit
LONG_S, START_S, STOP_S, REPLY_MS = 1800.0, 60.0, 600.0, 60_000  # 300k on 2 cores is slow
THROUGHPUT_MAX_S = 30.0
# Per-request log lines would distort timings: off except in the server-side phase.
QUIET = {"MEMORYD_LOGGING__FILE": "false", "MEMORYD_LOGGING__LEVEL": "warning"}
LOGGED = {"MEMORYD_LOGGING__FILE": "true", "MEMORYD_LOGGING__LEVEL": "info"}
COMMIT_S = {"MEMORYD_JOBS__INDEX_COMMIT_S": "5"}  # the product default (conftest uses 1 s)
INJECT_P95_MS = {3_000: 2.0, 30_000: 5.0, 300_000: 10.0}
MIN_INJECT_PER_S = {3_000: 3_000.0, 30_000: 1_500.0}  # from 8 clients (issue 12)
MAX_RSS_MB, MAX_READY_S = 80.0, 0.5

# --------------------------------------------------------------------------- synthetic corpus

COMPONENTS = (
    "payments worker|auth middleware|billing service|search indexer|upload handler|session store|"
    "rate limiter|job scheduler|email sender|feature flag client|CLI entry point|GraphQL gateway|"
    "webhook receiver|cache layer|migration runner|metrics exporter|settings loader|ORM layer"
).split("|")
VERBS = (
    "retries caches validates serializes batches debounces streams retrieves invalidates signs "
    "encrypts compresses paginates throttles dedupes logs wraps parses renders mocks patches"
).split()
OBJECTS = (
    "webhooks sessions tokens migrations invoices uploads requests payloads events jobs rows "
    "queries thumbnails cookies headers timestamps fixtures snapshots configs tenants orders"
).split()
LIBS = (
    "Stripe Redis Postgres SQLAlchemy pytest Django FastAPI Celery React Docker Kubernetes boto3 "
    "httpx pydantic msgspec tantivy SQLite zeromq Sentry Prometheus webpack vite ruff mypy Kafka"
).split()
QUALIFIERS = (
    "with exponential backoff|behind a feature flag|only in production|on every request|"
    "inside one transaction|in a background thread|per tenant|at most once|when the cache is cold"
).split("|")
DIRS = "src/payments src/auth src/api src/core src/jobs web/components lib/utils infra".split()
FILES = "retry client models views handlers schema settings tasks utils routes store".split()
EXTS = "py py py ts tsx go sql yaml toml md".split()
TAGS = "git ci testing perf security db api frontend deploy docs infra auth cache".split()
COMMANDS = ("make lint", "pytest -q", "npm run build", "alembic upgrade head")
TEMPLATES = (
    "The {comp} {verb} {obj} {qual}; see {path}.|"
    "We use {lib} for {obj} because {word} {word2} was too slow.|"
    "Never let the {comp} touch {obj} directly; {path} {verb} them first.|"
    "{lib} {ver} breaks {obj} when {word} is set, so it is pinned in {path}.|"
    "Decided to move {obj} from {lib} to {lib2} after the {word} incident.|"
    "Run `{cmd}` before pushing, otherwise the {comp} fails on {obj}.|"
    "The {comp} reads {word} from {path} at start-up, not per request.|"
    "Bug: the {comp} {verb} {obj} twice when {lib} times out {qual}.|"
    "{path} owns {obj}; the {comp} only {verb} them {qual}."
).split("|")
CATEGORIES = dict(
    task_progress=20, discovery=18, file_change=15, decision=10, pattern=10,
    warning=7, error=7, architecture=5, spec=4, preference=4,
)  # fmt: skip
SYLLABLES = "ka lo mi ra ven tor dex bel qua zim sor nal fen gri pol tav ux ori mek sha".split()
SUFFIXES = ("", "", "er", "ing", "Id", "Map", "Svc", "_v2", "Cache", "Queue")


class Corpus:
    """Seeded memory-like entries and queries: real project words take the frequent Zipf ranks,
    a few thousand synthetic identifiers the long tail; ~10–80 words, log-normal."""

    def __init__(self, seed: int) -> None:
        build = random.Random(seed)
        real = [w for g in (VERBS, OBJECTS, LIBS, FILES, TAGS, COMPONENTS, QUALIFIERS) for w in g]
        real = list(dict.fromkeys(w for phrase in real for w in phrase.split()))
        synthetic = {
            "".join(build.choices(SYLLABLES, k=build.randint(2, 3))) + build.choice(SUFFIXES)
            for _ in range(5_000)
        }
        self.words = real + sorted(synthetic - set(real))
        stems = sorted({*FILES, *synthetic})
        paths = {
            f"{build.choice(DIRS)}/{build.choice(stems)}.{build.choice(EXTS)}" for _ in range(2000)
        }
        self.paths = build.sample(sorted(paths), len(paths))
        zipf = (
            list(itertools.accumulate(r**-1.07 for r in range(1, len(x) + 1)))
            for x in (self.words, self.paths)
        )
        self._cum = {id(self.words): next(zipf), id(self.paths): next(zipf)}
        self.rng = random.Random(seed + 1)

    def pick(self, population: list[str]) -> str:
        """Zipf-distributed: the first of ``population`` are the most frequent."""
        return self.rng.choices(population, cum_weights=self._cum[id(population)])[0]

    def _sentence(self, paths: list[str]) -> str:
        r, path = self.rng, self.pick(self.paths)
        text = r.choice(TEMPLATES).format(
            comp=r.choice(COMPONENTS), verb=r.choice(VERBS), obj=r.choice(OBJECTS),
            lib=r.choice(LIBS), lib2=r.choice(LIBS), qual=r.choice(QUALIFIERS), path=path,
            word=self.pick(self.words), word2=self.pick(self.words), cmd=r.choice(COMMANDS),
            ver=f"{r.randint(1, 9)}.{r.randint(0, 30)}",
        )  # fmt: skip
        paths += [path] if path in text else []
        return text

    def entry(self, now: float) -> str:
        r, words, paths = self.rng, [], []
        target = min(80, max(10, round(r.lognormvariate(math.log(24), 0.55))))
        while len(words) < target:
            if target - len(words) < 8:  # top up with long-tail words rather than overshoot
                words += [self.pick(self.words) for _ in range(target - len(words))]
            else:
                words += self._sentence(paths).split()
        content = " ".join(words)
        content = content if len(content) <= 500 else content[:500].rsplit(" ", 1)[0]
        paths += [self.pick(self.paths)] if r.random() < 0.3 else []
        return json.dumps(
            {
                "content": content,
                "category": r.choices(list(CATEGORIES), list(CATEGORIES.values()))[0],
                "tags": r.sample(TAGS, r.choices((0, 1, 2, 3), (40, 35, 18, 7))[0]),
                "file_paths": list(dict.fromkeys(paths))[:4],
                "created_at": now - min(365.0, r.expovariate(1 / 30)) * 86_400,
            }
        )

    def queries(self, n: int) -> list[tuple[str, list[str]]]:
        """2–6 words, one in five with a typo; half name an active file (file affinity)."""
        r, out = self.rng, []
        for _ in range(n):
            words = [self.pick(self.words) for _ in range(r.randint(2, 6))]
            long = [i for i, w in enumerate(words) if len(w) >= 5]
            if long and r.random() < 0.2:
                i = r.choice(long)
                cut = r.randrange(1, len(words[i]) - 1)
                words[i] = words[i][:cut] + words[i][cut + 1 :]  # a dropped letter
            out.append((" ".join(words), [self.pick(self.paths)] if r.random() < 0.5 else []))
        return out


# --------------------------------------------------------------------------- daemon helpers


def compile_bytecode() -> None:
    """As an installed package has it (pip compiles on install): without cached bytecode, e.g.
    under PYTHONDONTWRITEBYTECODE, every daemon start would also compile memoryd's ~200 modules
    (~0.35 s of the ready time measured before this was done)."""
    for package in (p, memoryd):
        compileall.compile_dir(Path(package.__file__).parent.parent, quiet=1)


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def call(client: Client, request: p.Request, budget_s: float = LONG_S) -> dict:
    reply = client.call(request, budget_s=budget_s)
    if not isinstance(reply, p.Ok):
        raise RuntimeError(f"{type(request).__name__}: {reply.code}: {reply.message}")
    return msgspec.to_builtins(p.result_of(request, reply))


def timed(client: Client, request: p.Request, budget_s: float = LONG_S) -> float:
    started = time.perf_counter()
    call(client, request, budget_s)
    return time.perf_counter() - started


@contextlib.contextmanager
def running(env: Env, extra: dict[str, str]):
    """A ``memoryd run`` and a client; yields (client, seconds from Popen to the first hello)."""
    daemon = Daemon(env, extra)
    started = time.perf_counter()
    daemon.start(wait=False)
    assert daemon.proc is not None
    try:
        with Client(endpoint=f"ipc://{env.socket}") as client:
            while time.perf_counter() < started + START_S:
                if daemon.proc.poll() is not None:
                    raise RuntimeError(f"daemon exited {daemon.proc.returncode}:\n{daemon.log()}")
                try:
                    if isinstance(client.call(p.Hello(), budget_s=0.5), p.Ok):
                        break
                except DaemonUnavailable:  # no socket yet: wait on the process, not blind sleep
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        daemon.proc.wait(timeout=0.005)
            else:
                raise TimeoutError(f"daemon not ready within {START_S}s:\n{daemon.log()}")
            yield client, time.perf_counter() - started
    finally:
        try:
            daemon.stop(timeout=STOP_S)  # SIGTERM: the daemon closes the index (waits merges)
        finally:
            if daemon.proc.poll() is None:
                daemon.proc.kill()
                daemon.proc.wait(timeout=30)


def rss_mb(client: Client) -> float:
    """The daemon's resident memory; its parts (heap and stacks, mapped files: the index, the
    libraries) on stderr."""
    status = Path(f"/proc/{call(client, p.Hello())['pid']}/status").read_text()
    kb = {k: int(status.split(f"{k}:")[1].split()[0]) for k in ("VmRSS", "RssAnon", "RssFile")}
    progress(
        f"  RSS {kb['VmRSS'] / 1024:.1f} MB: anonymous {kb['RssAnon'] / 1024:.1f}, "
        f"files {kb['RssFile'] / 1024:.1f}"
    )
    return kb["VmRSS"] / 1024


# --------------------------------------------------------------------------- measurements


def load(client: Client, env: Env, corpus: Corpus, size: int) -> dict:
    """Import in requests as memctl sends them (at most IMPORT_MAX_LINES lines, < 3 MiB); only
    the time inside Import calls counts as import time."""
    done = {"imported": 0, "duplicates": 0, "import_s": 0.0}
    batch: list[str] = []
    now, first, nbytes, began = time.time(), 1, 0, time.perf_counter()
    for i in range(size):
        batch.append(corpus.entry(now))
        nbytes += len(batch[-1]) + 8  # ASCII JSON plus generous msgpack framing
        if i + 1 < size and nbytes < CHUNK_BYTES - 1024 and len(batch) < p.IMPORT_MAX_LINES:
            continue
        started = time.perf_counter()
        result = call(client, p.Import(project=str(env.project), lines=batch, first_line=first))
        done["import_s"] += time.perf_counter() - started
        if result["rejected"]:
            raise RuntimeError(f"rejected lines: {result['rejected'][:3]}")
        done["imported"] += result["imported"]
        done["duplicates"] += result["duplicates"]
        first, batch, nbytes = first + len(batch), [], 0
        progress(f"  imported {done['imported']:,}/{size:,} ({time.perf_counter() - began:.0f} s)")
    return done


def latency(client: Client, env: Env, queries: list[tuple[str, list[str]]]) -> dict:
    """Interleaved inject and search per query; client-side round trips in ms."""
    samples: dict[str, list[float]] = {"inject": [], "search": []}
    for query, files in queries:
        inject = p.Inject(project=str(env.project), query=query, files=files, format="claude")
        search = p.Search(project=str(env.project), query=query, files=files)
        samples["inject"].append(timed(client, inject, budget_s=60) * 1000)
        samples["search"].append(timed(client, search, budget_s=60) * 1000)
    return samples


def server_ms(log: Path, offset: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"inject": [], "search": []}
    with log.open("rb") as fh:
        fh.seek(offset)
        for line in fh:
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if record.get("event") == "request" and record.get("op") in samples:
                    samples[record["op"]].append(float(record["ms"]))
    return samples


def _worker(address: str, project: str, queries: list, count: int, barrier, results) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    frames = [
        p.encode(p.Inject(id=i + 1, project=project, query=q, files=f, format="claude"))
        for i, (q, f) in enumerate(queries)
    ]
    barrier.wait(timeout=120)
    started, sent, ok = time.monotonic(), 0, 0
    while sent < count and time.monotonic() < started + THROUGHPUT_MAX_S:
        sock.send(frames[sent % len(frames)])
        sent += 1
        if not sock.poll(REPLY_MS):
            break
        ok += isinstance(p.decode_reply(sock.recv()), p.Ok)
    results.put((started, time.monotonic(), sent, ok))
    ctx.destroy(linger=0)


def throughput(env: Env, queries: list, count: int, clients: int = CLIENTS) -> dict:
    """``clients`` processes, each its own context and persistent DEALER, in a closed loop of
    ``count`` injects (or ``THROUGHPUT_MAX_S``, whichever ends first)."""
    spawn = mp.get_context("spawn")
    barrier, results = spawn.Barrier(clients), spawn.Queue()
    args = (f"ipc://{env.socket}", str(env.project), queries, count, barrier, results)
    procs = [spawn.Process(target=_worker, args=args, daemon=True) for _ in range(clients)]
    try:
        for proc in procs:
            proc.start()
        got = [results.get(timeout=120 + THROUGHPUT_MAX_S + REPLY_MS / 1000) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.terminate()
    sent, ok = sum(g[2] for g in got), sum(g[3] for g in got)
    if ok != sent:
        raise RuntimeError(f"throughput: {ok} of {sent} injects answered ok")
    wall = max(g[1] for g in got) - min(g[0] for g in got)
    return {"inject_per_s": ok / wall, "throughput_requests": ok}


def load_phase(env: Env, corpus: Corpus, size: int, search0: p.Search) -> tuple[dict, str]:
    """Import; the first search then catches the index up (no timed commit runs meanwhile)."""
    with running(env, QUIET | {"MEMORYD_JOBS__INDEX_COMMIT_S": "3600"}) as (client, _):
        row = load(client, env, corpus, size)
        row["catchup_s"] = timed(client, search0)
        slug = call(client, p.StatusRequest(project=str(env.project)))["project"]["slug"]
    return row, slug


def serve_phase(env: Env, search0: p.Search, queries: list, per_client: int) -> tuple[dict, dict]:
    """Rebuild from SQLite (index/ deleted), then socket latency and throughput, logs off."""
    with running(env, QUIET | COMMIT_S) as (client, _):
        row = {"rebuild_s": timed(client, search0), "rss_after_rebuild_mb": rss_mb(client)}
        progress(f"  rebuild {row['rebuild_s']:.2f} s; socket latency")
        latency(client, env, queries[:WARMUP])
        socket = latency(client, env, queries[WARMUP:])
        progress(f"  throughput: {CLIENTS} clients, {per_client} injects or {THROUGHPUT_MAX_S:g} s")
        row |= throughput(env, queries, per_client)
        row["rss_after_throughput_mb"] = rss_mb(client)
    return row, socket


def restart_ready(env: Env, search0: p.Search) -> tuple[float, float]:
    """Seconds from Popen to the first hello, and to the first search (opens the project)."""
    with running(env, LOGGED | COMMIT_S) as (client, hello_s):
        return hello_s, hello_s + timed(client, search0)


def restart_phase(env: Env, search0: p.Search, queries: list) -> tuple[dict, dict, dict]:
    """Restarts for the ready times; on the last one, server-side latency from the log: right
    away, while the compaction the project's opening starts runs (after the import it archives
    most of the backdated corpus: 27,000 of 30,000), and again once that run has ended (a
    ``compact`` request waits for it)."""
    ready = [restart_ready(env, search0) for _ in range(READY_RUNS - 1)]
    log = env.state / "memoryd.log"
    with running(env, LOGGED | COMMIT_S) as (client, hello_s):
        ready.append((hello_s, hello_s + timed(client, search0)))
        latency(client, env, queries[:WARMUP])
        during = logged_latency(client, env, log, queries[WARMUP:])
        row = {"rss_after_latency_mb": rss_mb(client)}
        while not call(client, p.Compact(project=str(env.project)))["done"]:
            progress("  the on-load compaction goes on")
        steady = logged_latency(client, env, log, queries[WARMUP:])
    hello, first_search = zip(*ready, strict=True)
    row["ready_hello_s"], row["ready_search_s"] = map(statistics.median, (hello, first_search))
    return row, during, steady


def logged_latency(client: Client, env: Env, log: Path, queries: list) -> dict[str, list[float]]:
    """``latency`` of ``queries``, as the daemon logged it (server-side ms)."""
    call(client, p.Hello())  # every earlier request's log line is written by now
    offset = log.stat().st_size
    latency(client, env, queries)
    call(client, p.Hello())  # and this one's
    return server_ms(log, offset)


def sweep_phase(
    env: Env, search0: p.Search, queries: list, per_client: int, sweep: Sweep
) -> dict[str, list[float]]:
    """inject/s per (readers, clients), ``sweep.rounds`` times: a daemon per readers setting
    per round, the settings taking turns, each warmed up by a search (opens the project)."""
    found: dict[str, list[float]] = {}
    for turn in range(sweep.rounds):
        for readers in sweep.readers:
            with running(env, QUIET | COMMIT_S | {"MEMORYD_SERVER__READERS": str(readers)}) as (
                client,
                _,
            ):
                timed(client, search0)
                latency(client, env, queries[:WARMUP])
                for clients in sweep.clients:
                    rate = throughput(env, queries, per_client, clients)["inject_per_s"]
                    found.setdefault(f"{readers}/{clients}", []).append(rate)
                    progress(
                        f"  round {turn + 1}: readers {readers}, {clients} clients: "
                        f"{rate:,.0f} inject/s"
                    )
    return found


class Sweep:
    def __init__(self, clients: list[int], readers: list[int], rounds: int) -> None:
        self.clients, self.readers, self.rounds = clients, readers, rounds


def pcts(values: list[float], qs: tuple[int, ...] = (50, 95, 99)) -> dict[str, float]:
    ordered = sorted(values)  # nearest rank, as in client_latency.py
    return {f"p{q}": round(ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1], 3) for q in qs}


def bench_size(
    root: Path, size: int, n_queries: int, per_client: int, sweep: Sweep, sweep_only: bool
) -> dict:
    env, corpus = make_env(root / f"n{size}"), Corpus(SEED)
    queries = corpus.queries(n_queries + WARMUP)  # drawn first: the same queries at every size
    search0 = p.Search(project=str(env.project), query=queries[WARMUP][0])
    try:
        progress(f"{size:,}: loading")
        row, slug = load_phase(env, corpus, size, search0)
        if not sweep_only:
            progress(f"{size:,}: catch-up {row['catchup_s']:.2f} s; deleting index/, restarting")
            shutil.rmtree(env.data / "projects" / slug / "index")
            served, socket = serve_phase(env, search0, queries, per_client)
            progress(f"{size:,}: {READY_RUNS} restarts for ready times; server-side latency")
            restarted, during, server = restart_phase(env, search0, queries)
        progress(f"{size:,}: inject/s by readers and clients, {sweep.rounds} rounds")
        rates = sweep_phase(env, search0, queries, per_client, sweep)
    finally:
        shutil.rmtree(env.vars["XDG_RUNTIME_DIR"], ignore_errors=True)
        shutil.rmtree(env.root, ignore_errors=True)
    if sweep_only:
        return {"entries": size, **row, "sweep": rates}
    row = {"entries": size, **row, **served, **restarted, "sweep": rates}
    row["rss_mb"] = max(v for k, v in row.items() if k.startswith("rss_after"))
    for op in ("inject", "search"):
        for logged in (server, during):
            if len(logged[op]) != n_queries:
                raise RuntimeError(f"{len(logged[op])} {op} log lines for {n_queries} requests")
        row[f"{op}_server"], row[f"{op}_socket"] = pcts(server[op]), pcts(socket[op])
        row[f"{op}_server_during"] = pcts(during[op])
    # Throughput once no on-load compaction runs: the sweep's 8 clients on the owner thread.
    steady = rates.get(f"0/{CLIENTS}")
    row["inject_per_s_steady"] = statistics.median(steady) if steady else None
    return row


# --------------------------------------------------------------------------- report


def checks(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        n, at_30k = r["entries"], r["entries"] == 30_000
        rules = [
            (
                f"inject/s, {CLIENTS} clients",
                r["inject_per_s_steady"],
                ">=",
                MIN_INJECT_PER_S.get(n),
            ),
            (" ... during compaction", r["inject_per_s"], ">=", MIN_INJECT_PER_S.get(n)),
            ("server inject p95 ms", r["inject_server"]["p95"], "<=", INJECT_P95_MS.get(n)),
            (
                " ... during compaction",
                r["inject_server_during"]["p95"],
                "<=",
                INJECT_P95_MS.get(n),
            ),
            ("RSS MB", r["rss_mb"], "<=", MAX_RSS_MB if at_30k else None),
            ("ready (search) s", r["ready_search_s"], "<=", MAX_READY_S if at_30k else None),
        ]
        for metric, value, op, target in (r for r in rules if None not in (r[1], r[3])):
            met = value >= target if op == ">=" else value <= target
            out.append(dict(size=n, metric=metric, value=value, op=op, target=target, met=met))
    return out


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ms(d: dict, keys: tuple[str, ...] = ("p50", "p95", "p99")) -> str:
    return "/".join(f"{d[k]:.2f}" for k in keys)


COLUMNS = (
    ("entries", lambda r: f"{r['entries']:,}"),
    ("import s", lambda r: f"{r['import_s']:.1f}"),
    ("catch-up s", lambda r: f"{r['catchup_s']:.2f}"),
    ("rebuild s", lambda r: f"{r['rebuild_s']:.2f}"),
    ("inject ms srv p50/p95/p99", lambda r: _ms(r["inject_server"])),
    ("search ms srv p50/p95/p99", lambda r: _ms(r["search_server"])),
    ("inject ms srv, compacting", lambda r: _ms(r["inject_server_during"])),
    ("inject ms sock p50/p95", lambda r: _ms(r["inject_socket"], ("p50", "p95"))),
    ("inject/s (8)", lambda r: _rate(r["inject_per_s_steady"])),
    ("inject/s (8), compacting", lambda r: _rate(r["inject_per_s"])),
    ("RSS MB max/restart", lambda r: f"{r['rss_mb']:.0f}/{r['rss_after_latency_mb']:.0f}"),
    ("ready hello s", lambda r: f"{r['ready_hello_s']:.2f}"),
    ("ready search s", lambda r: f"{r['ready_search_s']:.2f}"),
)


def print_table(summary: dict) -> None:
    print(f"python {summary['python']}, cpu_count {summary['cpu_count']}, seed {SEED}, ", end="")
    print(f"{summary['queries']} queries per size, nearest-rank percentiles\n")
    header = " | ".join(name for name, _ in COLUMNS)
    print(f"{header}\n{'-' * len(header)}")
    for r in summary["rows"]:
        print(" | ".join(cell(r).rjust(len(name)) for name, cell in COLUMNS))
    print("\ntargets (design §13):")
    for c in summary["targets"]:
        print(
            f"  {c['size']:>7,}  {c['metric']:<22} {c['value']:>9,.2f} {c['op']} {c['target']:<5g}"
            f" {'met   ' if c['met'] else 'MISSED'} ({c['value'] / c['target']:.3g}x target)"
        )


def print_sweep(summary: dict) -> None:
    """inject/s medians per readers setting and client count; × is the median over rounds of
    each figure's ratio to the first readers setting's (the owner thread's) in its round."""
    readers, clients = summary["readers"], summary["clients"]
    base = readers[0]
    print(f"\ninject/s by client processes, median of {summary['rounds']} rounds", end="")
    print(f" (x: ratio to readers={base} in the same round)")
    header = "entries | readers | " + " | ".join(f"{c:>2} clients" for c in clients)
    print(f"{header}\n{'-' * len(header)}")
    for r in summary["rows"]:
        sweep = r["sweep"]
        for n in readers:
            cells = []
            for c in clients:
                rates, before = sweep[f"{n}/{c}"], sweep[f"{base}/{c}"]
                ratio = statistics.median(a / b for a, b in zip(rates, before, strict=True))
                cell = f"{statistics.median(rates):,.0f}"
                cells.append(cell if n == base else f"{cell} {ratio:.2f}x")
            print(f"{r['entries']:>7,} | {n:>7} | " + " | ".join(f"{x:>10}" for x in cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", help="comma-separated entry counts (default 3000,30000,300000)")
    parser.add_argument("--quick", action="store_true", help="3000,30000 and fewer requests")
    parser.add_argument("--json", action="store_true", help="one JSON object, not a table")
    parser.add_argument("--sweep-only", action="store_true", help="import, then the sweep only")
    parser.add_argument("--clients", default="1,2,4,8", help="client processes to sweep")
    parser.add_argument(
        "--readers",
        default="0,2",
        help="server.readers settings to compare; the first is the baseline (0: the owner "
        "thread serves every read, the daemon's default)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="sweep rounds (medians)")
    args = parser.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else []
        sweep = Sweep(
            [int(c) for c in args.clients.split(",")],
            [int(r) for r in args.readers.split(",")],
            max(1, args.rounds),
        )
    except ValueError:
        parser.error("--sizes, --clients and --readers take comma-separated integers")
    sizes = sizes or ([3_000, 30_000] if args.quick else [3_000, 30_000, 300_000])
    n_queries, per_client = (60, 200) if args.quick else (200, 1_500)
    compile_bytecode()
    root = Path(tempfile.mkdtemp(prefix="memoryd-bench-retrieval-"))
    try:
        rows = [
            bench_size(root, size, n_queries, per_client, sweep, args.sweep_only) for size in sizes
        ]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summary = dict(python=platform.python_version(), cpu_count=os.cpu_count(), seed=SEED)
    summary |= dict(queries=n_queries, rows=rows, clients=sweep.clients, readers=sweep.readers)
    summary |= dict(rounds=sweep.rounds)
    if not args.sweep_only:
        summary["targets"] = checks(rows)
    if args.json:
        print(json.dumps(summary))
        return 0
    if not args.sweep_only:
        print_table(summary)
    print_sweep(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
