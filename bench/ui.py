"""Benchmark: how long ``memctl ui`` takes to open the memory view on a daemon holding 30k
entries (issue 18 acceptance 4: under a second, median of 5).

A real daemon on a private socket (as tests/conftest.py starts it) is given N synthetic entries
through ``memctl import``; ``memctl ui --no-browser`` serves the page; headless Chromium
(Debian's, through Playwright) opens the printed address in a fresh browser context each run
(no cache, no cookie) and the clock stops when the memory view's first page of entries is on
screen. Rows:

- ``open memory view``: navigation to the rendered list, measured from Python (wall clock);
- ``... in the page``: the same from the page's own navigation start (performance.now());
- ``GET /api/entries``: the one API call the view makes, over HTTP with the token;
- ``memctl list --limit 100`` (baseline): the same page of entries through the command line,
  a process start included.

    .venv/bin/python bench/ui.py [--entries 30000] [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from tests.conftest import BIN, Daemon, make_env, memctl

CHROMIUM = "/usr/bin/chromium"
WORDS = (
    "build deploy cache index parser schema token budget review session hook agent entry graph "
    "socket daemon release branch module test fixture config timeout retry queue worker"
).split()


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _entries(n: int) -> str:
    lines = []
    for i in range(n):
        words = " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7, 11, 13))
        lines.append(json.dumps({"content": f"synthetic fact {i}: {words}", "tags": ["bench"]}))
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=30_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    root = Path(tempfile.mkdtemp(prefix="memoryd-bench-ui-"))
    env = make_env(root)
    daemon = Daemon(env).start()
    ui = None
    rows: dict[str, list[float]] = {}
    try:
        started = time.perf_counter()
        imported = memctl(env, "--timeout", "600", "import", "-", stdin=_entries(args.entries))
        if imported.code != 0:
            raise RuntimeError(imported.stderr)
        load_s = time.perf_counter() - started
        ui = subprocess.Popen(
            [str(BIN / "memctl"), "ui", "--no-browser"],
            env=env.environ(),
            cwd=env.project,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert ui.stdout is not None
        url = ui.stdout.readline().split(": ", 1)[1].strip()
        port = int(url.split("/?")[0].rsplit(":", 1)[1])
        token = url.split("token=")[1]

        def api() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", "/api/entries", headers={"X-Memoryd-Token": token})
            response = conn.getresponse()
            assert response.status == 200 and json.loads(response.read())["total"]
            conn.close()

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            wall, inside = [], []
            for n in range(args.runs + 1):  # the first run warms the daemon and the browser
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                page = context.new_page()
                began = time.perf_counter()
                page.goto(url)
                page.wait_for_selector("#results li")
                took = (time.perf_counter() - began) * 1000
                shown = page.evaluate("performance.now()")
                summary = page.text_content(".summary") or ""
                assert f"of {args.entries} entries" in summary, summary
                context.close()
                if n:
                    wall.append(took)
                    inside.append(shown)
            browser.close()
        rows["open memory view"] = wall
        rows["... in the page"] = inside
        api()
        rows["GET /api/entries"] = [_timed(api) for _ in range(args.runs)]
        rows["memctl list --limit 100 (baseline)"] = [
            _timed(lambda: memctl(env, "--json", "list", "--limit", "100"))
            for _ in range(args.runs)
        ]
    finally:
        if ui is not None:
            ui.terminate()
            ui.communicate(timeout=30)
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)

    base = statistics.median(rows["memctl list --limit 100 (baseline)"])
    table = [
        {
            "case": name,
            "runs": len(samples),
            "median_ms": round(statistics.median(samples), 1),
            "p95_ms": round(_p95(samples), 1),
            "ratio_to_baseline": round(statistics.median(samples) / base, 2),
        }
        for name, samples in rows.items()
    ]
    machine = f"{platform.platform()}, {os.cpu_count()} cpus"
    if args.json:
        print(json.dumps({"machine": machine, "entries": args.entries, "rows": table}))
        return 0
    print(f"machine: {machine}; {args.entries} entries imported in {load_s:.1f} s")
    print(f"{'case':36} | {'runs':>4} | {'median ms':>9} | {'p95 ms':>8} | ratio to baseline")
    for row in table:
        print(
            f"{row['case']:36} | {row['runs']:>4} | {row['median_ms']:>9} | "
            f"{row['p95_ms']:>8} | {row['ratio_to_baseline']}"
        )
    return 0


def _timed(step: object) -> float:
    began = time.perf_counter()
    step()  # type: ignore[operator]
    return (time.perf_counter() - began) * 1000


if __name__ == "__main__":
    sys.exit(main())
