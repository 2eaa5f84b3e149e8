"""The memory browser (issue 18), driven in headless Chromium (Debian's, through Playwright for
Python) against a real daemon holding a captured sample transcript and a few entries, and over
plain HTTP for what it must refuse. What the page shows is checked against ``memctl``.

One daemon, one ``memctl ui`` and one browser for the module. Screenshots of each view at 1280
and 390 px go to ``$MEMORYD_UI_SHOTS`` when set (``docs/ui`` holds the committed ones), else to a
temporary folder."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import BIN, Daemon, Env, make_env, memctl, ok_json, until
from test_review import SAMPLE, SAMPLES, capture

CHROMIUM = "/usr/bin/chromium"
WIDTHS = {"wide": 1280, "narrow": 390}
XSS_IMG = "<img src=x onerror=\"document.title='x'\">"
XSS_SCRIPT = "<script>document.title='s'</script> keep the build green"

sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]'")

# One daemon, one memctl ui and one browser serve the whole module: under xdist
# (--dist loadgroup, set in pyproject.toml) its tests stay on one worker instead of each worker
# starting its own.
pytestmark = pytest.mark.xdist_group("ui")


class UI:
    """``memctl ui --no-browser`` as a user starts it; ``url`` is the address it printed."""

    def __init__(self, env: Env) -> None:
        self.proc = subprocess.Popen(
            [str(BIN / "memctl"), "ui", "--no-browser"],
            env=env.environ(),
            cwd=env.project,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # printed once the socket listens
        assert line.startswith("memory browser: http://127.0.0.1:"), self.proc.stderr
        self.url = line.split(": ", 1)[1].strip()
        self.base, self.token = self.url.split("/?token=")
        self.port = int(self.base.rsplit(":", 1)[1])

    def request(
        self, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.putrequest(method, path, skip_host="Host" in (headers or {}))
            for name, value in (headers or {}).items():
                conn.putheader(name, value)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.communicate(timeout=30)  # waits, and closes its pipes


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Env, UI]]:
    sample = SAMPLES / f"{SAMPLE}.jsonl"
    if not sample.exists():
        pytest.skip(f"shared samples not found at {SAMPLES}")
    env = make_env(tmp_path_factory.mktemp("ui"))
    daemon = Daemon(env).start()
    try:
        capture(env, sample)
        until(lambda: ok_json(env, "review", "--limit", "200")["items"], "findings to review")
        for text in (
            "we deploy with pnpm run release from the main branch",
            "pnpm workspaces hold the three packages",
            "the release checklist lives in docs/release.md",
            XSS_IMG,
            XSS_SCRIPT,
        ):
            assert memctl(env, "remember", text, "--tag", "ui-test").code == 0
        ui = UI(env)
        try:
            yield env, ui
        finally:
            ui.stop()
    finally:
        daemon.stop()
        import shutil

        shutil.rmtree(env.vars["XDG_RUNTIME_DIR"], ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)")
    with sync_api.sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any, world: tuple[Env, UI]) -> Iterator[Any]:
    """A fresh page, opened at the address memctl ui printed; fails the test on a script error
    or a Content-Security-Policy violation."""
    _, ui = world
    context = browser.new_context(viewport={"width": WIDTHS["wide"], "height": 900})
    tab = context.new_page()
    problems: list[str] = []
    tab.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    tab.on(
        "console",
        lambda msg: problems.append(msg.text) if msg.type == "error" else None,
    )
    tab.goto(ui.url)
    tab.wait_for_selector("#results, .empty")
    yield tab
    context.close()
    assert not problems, problems


def shots_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("MEMORYD_UI_SHOTS")
    folder = Path(given) if given else tmp_path_factory.getbasetemp() / "ui-shots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def screenshots(page: Any, name: str, folder: Path, ready: str) -> None:
    """The view at each width: wait for ``ready`` after the resize, then save the full page."""
    for label, width in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": 900 if width > 500 else 844})
        page.wait_for_selector(ready)
        # Nothing sticks out sideways: the page is no wider than the window.
        assert page.evaluate("document.documentElement.scrollWidth") <= width, (name, label)
        path = folder / f"{name}-{width}.png"
        page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 5_000
    page.set_viewport_size({"width": WIDTHS["wide"], "height": 900})


def texts(page: Any, selector: str) -> list[str]:
    return list(page.eval_on_selector_all(selector, "nodes => nodes.map(n => n.textContent)"))


# --------------------------------------------------------------------------- HTTP


def test_requests_without_the_token_from_another_host_or_without_the_header_are_refused(
    world: tuple[Env, UI],
) -> None:
    env, ui = world
    header = {"X-Memoryd-Token": ui.token}
    ok, page = ui.request("GET", f"/?token={ui.token}")
    assert ok == 200 and ui.token.encode() in page
    # The page sets a strict policy and no inline script or style.
    conn = http.client.HTTPConnection("127.0.0.1", ui.port, timeout=30)
    conn.request("GET", f"/?token={ui.token}")
    response = conn.getresponse()
    csp = response.getheader("Content-Security-Policy") or ""
    cookie = response.getheader("Set-Cookie") or ""
    response.read()
    conn.close()
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "default-src 'none'" in csp
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert b"<script>" not in page and b"style=" not in page

    # No token: not the page, not an asset, not the API.
    for path in ("/", "/static/app.js", "/api/entries", "/api/status", f"/?token={'x' * 32}"):
        status, body = ui.request("GET", path)
        assert status == 403 and b"refused" in body, path
    # The token in the address opens the page, never the API.
    assert ui.request("GET", f"/api/entries?token={ui.token}")[0] == 403
    assert ui.request("GET", "/api/entries", header)[0] == 200

    # A foreign Host (DNS rebinding), even with the token.
    for host in ("evil.example", f"evil.example:{ui.port}", f"127.0.0.1:{ui.port + 1}"):
        status, _ = ui.request("GET", f"/?token={ui.token}", {"Host": host, **header})
        assert status == 403, host
    assert ui.request("GET", "/api/status", {"Host": f"localhost:{ui.port}", **header})[0] == 200

    # A change with the cookie alone, from another origin, or not as JSON: refused, and nothing
    # changed.
    [entry] = [e for e in ok_json(env, "list")["entries"] if "release checklist" in e["content"]]
    body = json.dumps({"action": "pin", "id": entry["id"]}).encode()
    as_json = {"Content-Type": "application/json"}
    cookie_only = {"Cookie": cookie.split(";")[0], **as_json}
    assert ui.request("POST", "/api/entry", cookie_only, body)[0] == 403
    foreign = {**header, **as_json, "Origin": "http://evil.example"}
    assert ui.request("POST", "/api/entry", foreign, body)[0] == 403
    as_text = {**header, "Content-Type": "text/plain"}
    assert ui.request("POST", "/api/entry", as_text, body)[0] == 403
    assert ok_json(env, "show", entry["id"])["entry"]["status"] == "confirmed"
    # With the header, it acts.
    assert ui.request("POST", "/api/entry", {**header, **as_json}, body)[0] == 200
    assert ok_json(env, "show", entry["id"])["entry"]["status"] == "pinned"
    assert memctl(env, "unpin", entry["id"]).code == 0


# --------------------------------------------------------------------------- the browser


def test_memory_search_shows_what_memctl_search_finds_in_its_order(
    page: Any, world: tuple[Env, UI], tmp_path_factory: pytest.TempPathFactory
) -> None:
    env, _ = world
    folder = shots_dir(tmp_path_factory)
    total = ok_json(env, "list")["total"]
    assert page.text_content(".summary").endswith(f"of {total} entries, newest first")
    screenshots(page, "memory", folder, "#results li")
    # Dark, as the system asks: the page follows prefers-color-scheme.
    light = page.evaluate("getComputedStyle(document.body).backgroundColor")
    page.emulate_media(color_scheme="dark")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") != light
    page.screenshot(path=str(folder / "memory-dark-1280.png"), full_page=True)
    page.emulate_media(color_scheme="light")

    expected = [r["id"] for r in ok_json(env, "search", "pnpm", "-k", "20")["results"]]
    assert len(expected) >= 3
    page.fill("input[name=q]", "pnpm")
    page.press("input[name=q]", "Enter")
    page.wait_for_selector(".summary:has-text('best first')")
    shown = page.eval_on_selector_all("#results li", "nodes => nodes.map(n => n.dataset.id)")
    assert shown == expected

    # An entry's page: content, provenance, history; pin from it, checked with memctl.
    page.click(f"#results li[data-id='{expected[0]}'] a.cover")
    page.wait_for_selector("pre.content-full")
    entry = ok_json(env, "show", expected[0])
    assert page.text_content("pre.content-full") == entry["entry"]["content"]
    assert "entry_added" in page.text_content(".history") or entry["history"] == []
    page.click("button:text-is('Pin')")
    page.wait_for_selector("h1 .badge.pinned")
    assert ok_json(env, "show", expected[0])["entry"]["status"] == "pinned"
    page.click("button:text-is('Unpin')")
    page.wait_for_selector("h1 .badge.confirmed")
    assert ok_json(env, "show", expected[0])["entry"]["status"] == "confirmed"

    # Edit: the current text to start from; saved as a new entry of the user's that supersedes
    # this one (archived as superseded).
    made = ok_json(env, "remember", "we tag releases as vX.Y.Z")["id"]
    old = ok_json(env, "show", made)["entry"]
    page.goto(page.url.split("#")[0] + "#/entry/" + made)
    page.wait_for_selector("pre.content-full")
    page.click("button:text-is('Edit')")
    assert page.input_value("form.edit textarea") == old["content"]
    page.fill("form.edit textarea", old["content"] + " (edited in the browser)")
    page.click("button:text-is('Save as a new version')")
    page.wait_for_selector("pre.content-full:has-text('edited in the browser')")
    new_id = page.url.rsplit("/", 1)[1]
    new = ok_json(env, "show", new_id)["entry"]
    assert new["content"] == old["content"] + " (edited in the browser)"
    assert new["source"]["kind"] == "user" and new["status"] == "confirmed"
    gone = ok_json(env, "show", old["id"])["entry"]
    assert gone["archived"] and gone["superseded_by"] == new_id

    # An entry captured from a transcript names its rule, session and line.
    captured = next(
        e
        for e in ok_json(env, "list", "--status", "candidate")["entries"]
        if e["source"]["kind"] == "transcript"
    )
    shown = ok_json(env, "show", captured["id"])
    assert shown["line"] and captured["source"]["rule_id"]
    page.goto(page.url.split("#")[0] + "#/entry/" + captured["id"])
    page.wait_for_selector("dl.facts")
    keys, values = texts(page, "dl.facts dt"), texts(page, "dl.facts dd")
    facts = dict(zip(keys, values, strict=True))
    assert facts["Rule"] == captured["source"]["rule_id"]
    assert facts["Session"] == captured["source"]["session_id"]
    assert facts["Line"] == str(shown["line"])
    page.click("button:text-is('Edit')")
    screenshots(page, "entry", folder, "form.edit textarea")


def test_untrusted_text_is_shown_as_text_and_runs_nothing(page: Any, world: tuple[Env, UI]) -> None:
    env, _ = world
    page.fill("input[name=tag]", "ui-test")
    page.press("input[name=tag]", "Enter")
    page.wait_for_selector(".summary:has-text('ui-test')")
    shown = texts(page, "#results li .content")
    assert XSS_IMG in shown and XSS_SCRIPT in shown  # the markup itself, as visible text
    assert page.locator("#results img, #results script").count() == 0
    [img] = [e for e in ok_json(env, "list")["entries"] if e["content"] == XSS_IMG]
    page.goto(page.url.split("#")[0] + "#/entry/" + img["id"])
    page.wait_for_selector("pre.content-full")
    assert page.text_content("pre.content-full") == XSS_IMG
    assert page.locator("main img").count() == 0
    assert page.title() == "memoryd"  # neither onerror nor the script ran


def test_review_accept_and_reject_from_the_keyboard_change_the_daemon(
    page: Any, world: tuple[Env, UI], tmp_path_factory: pytest.TempPathFactory
) -> None:
    env, _ = world
    page.click("nav a[data-view=review]")
    page.wait_for_selector("#review-list li.selected")
    screenshots(page, "review", shots_dir(tmp_path_factory), "#review-list li")
    items = ok_json(env, "review", "--limit", "500")["items"]
    assert page.eval_on_selector_all(
        "#review-list li", "nodes => nodes.map(n => n.dataset.id)"
    ) == [i["id"] for i in items]
    reasons = texts(page, "#review-list li .reason")
    assert reasons == [i["reason"] for i in items]

    # j moves down, a accepts the selected item.
    page.keyboard.press("j")
    first = page.eval_on_selector("#review-list li.selected", "n => n.dataset.id")
    assert first == items[1]["id"]
    page.keyboard.press("a")
    page.wait_for_selector(f"#review-list li[data-id='{first}']", state="detached")
    confirmed = ok_json(env, "list", "--status", "confirmed")["entries"]
    assert items[1]["content"] in {e["content"] for e in confirmed}

    # k moves up; r rejects with the reason typed above.
    page.keyboard.press("k")
    second = page.eval_on_selector("#review-list li.selected", "n => n.dataset.id")
    assert second == items[0]["id"]
    page.fill("#reject-reason", "not what we do")
    page.click("h1")  # leave the field: keys act on the list again
    page.keyboard.press("r")
    page.wait_for_selector(f"#review-list li[data-id='{second}']", state="detached")
    left = {i["id"] for i in ok_json(env, "review", "--limit", "500")["items"]}
    assert first not in left and second not in left

    # e edits the selected item: the user's words become confirmed memory in its place.
    third = page.eval_on_selector("#review-list li.selected", "n => n.dataset.id")
    page.keyboard.press("e")
    page.fill("#review-list li.selected textarea", "we record audio with AudioWorklet only")
    page.click("#review-list li.selected button:text-is('Save as confirmed')")
    page.wait_for_selector(f"#review-list li[data-id='{third}']", state="detached")
    confirmed = ok_json(env, "list", "--status", "confirmed")["entries"]
    assert "we record audio with AudioWorklet only" in {e["content"] for e in confirmed}
    audit = [json.loads(x)["event"] for x in memctl(env, "audit", "-n", "5").stdout.splitlines()]
    [rejected] = [e for e in audit if e["type"] == "review_rejected"]
    assert rejected["reason"] == "not what we do"


def test_the_payload_preview_is_what_memctl_inject_prints(
    page: Any, world: tuple[Env, UI], tmp_path_factory: pytest.TempPathFactory
) -> None:
    env, _ = world
    page.click("nav a[data-view=inject]")
    page.select_option("select[name=format]", "claude")
    page.fill("textarea[name=query]", "how do we release with pnpm")
    page.click("button:text-is('Show payload')")
    page.wait_for_selector("#payload")
    shown = page.eval_on_selector("#payload", "n => n.textContent")
    printed = memctl(env, "inject", "--format", "claude", "--query", "how do we release with pnpm")
    assert printed.code == 0 and printed.stdout
    assert shown.encode() == printed.stdout.encode()
    tiers = ok_json(env, "inject", "--format", "claude", "--query", "x")["tokens"]["tiers"]
    assert page.locator(".tiers meter").count() == len(tiers) > 0
    screenshots(page, "inject", shots_dir(tmp_path_factory), "#payload")


def test_the_audit_view_shows_a_change_made_elsewhere_within_two_seconds(
    page: Any, world: tuple[Env, UI], tmp_path_factory: pytest.TempPathFactory
) -> None:
    env, _ = world
    page.click("nav a[data-view=audit]")
    page.wait_for_selector("#live.ok")  # the stream is open
    page.wait_for_selector("#chain.ok")  # and the chain verified
    marker = f"audit marker {time.monotonic_ns()}"
    assert memctl(env, "remember", marker).code == 0  # another terminal
    page.wait_for_function(
        "text => [...document.querySelectorAll('#audit-rows li .content')]"
        ".some(n => n.textContent === text)",
        arg=marker,
        timeout=2000,
    )
    # Filtered by operation: only rows of that type stay visible.
    page.select_option("select[name=op]", "entry_added")
    visible = page.eval_on_selector_all(
        "#audit-rows li:not([hidden])", "nodes => nodes.map(n => n.dataset.type)"
    )
    assert visible and set(visible) == {"entry_added"}
    page.select_option("select[name=op]", "")
    screenshots(page, "audit", shots_dir(tmp_path_factory), "#audit-rows li")


def test_projects_sessions_health_and_graph_views(
    page: Any, world: tuple[Env, UI], tmp_path_factory: pytest.TempPathFactory
) -> None:
    env, _ = world
    folder = shots_dir(tmp_path_factory)
    assert memctl(env, "inject", "--query", "pnpm").code == 0  # a timed call at least

    # Another project the daemon holds memory for, with a memory bank, closed: the view lists
    # it from the projects operation without opening it.
    other = env.root / "other-project"
    (other / ".git").mkdir(parents=True, exist_ok=True)
    (other / "memory-bank").mkdir(exist_ok=True)
    assert memctl(env, "--project", str(other), "remember", "the other project's fact").code == 0
    page.click("nav a[data-view=projects]")
    page.wait_for_selector("main .card.selected")
    listed = {k["path"]: k for k in ok_json(env, "projects")["projects"]}
    here = listed[str(env.project.resolve())]
    assert str(env.project) in page.text_content("main .card.selected")

    def facts(path: str) -> dict[str, str]:
        card = f"#project-list li[data-path='{path}']"
        keys = texts(page, f"{card} dt")
        return dict(zip(keys, texts(page, f"{card} dd"), strict=True))

    shown = facts(here["path"])
    counts = here["entries"]
    assert shown["Entries"] == (
        f"{counts['confirmed']} confirmed{counts['pinned']} pinned"
        f"{counts['candidate']} candidates{counts['archived']} archived"
    )
    assert shown["Review"] == f"{here['awaiting_review']} waiting"
    assert shown["Sessions"] == str(here["sessions"]) == "1"
    assert here["last_capture_at"] and shown["Last capture"].endswith("ago")
    assert shown["Memory bank"] == "none" and shown["On disk"].endswith("iB")
    assert here["size_bytes"] > 0
    theirs = facts(str(other.resolve()))
    assert theirs["Memory bank"] == "present (memory-bank/)"
    assert theirs["Sessions"] == "0" and theirs["Last capture"] == "none yet"
    screenshots(page, "projects", folder, "main .card")

    # Sessions: a timeline per agent; a session's findings beside the lines they came from,
    # read by the daemon (memctl session shows the same).
    page.click("nav a[data-view=sessions]")
    page.wait_for_selector("main .card h3")
    [episode] = ok_json(env, "episodes")["episodes"]
    assert texts(page, "main .card h3") == [episode["title"] or "(untitled session)"]
    assert texts(page, "section.agent > h2 .badge") == [episode["agent"]]
    page.click("main .card.session details.findings summary")
    page.wait_for_selector(".finding-lines li")
    session = ok_json(env, "session", episode["session_id"])
    assert session["findings"] and session["unreadable"] is None
    rows = page.eval_on_selector_all(
        ".finding-lines li",
        "nodes => nodes.map(n => [n.dataset.finding, n.dataset.line,"
        " n.querySelector('.line-text') && n.querySelector('.line-text').textContent])",
    )
    assert rows == [
        [f["id"], str(f["line"]), f["text"] + (" …" if f["cut"] else "")]
        for f in session["findings"]
    ]
    # The line the review queue names for a finding is the line shown beside it.
    review_lines = {i["id"]: i["line"] for i in ok_json(env, "review", "--limit", "500")["items"]}
    assert any(review_lines.get(f["id"]) == f["line"] for f in session["findings"])
    lines = (SAMPLES / f"{SAMPLE}.jsonl").read_text().splitlines()
    for f in session["findings"]:
        assert 0 < len(f["text"]) <= 2000 and f["line"] <= len(lines)
    page.goto(page.url.split("#")[0] + "#/sessions/" + episode["session_id"])
    page.wait_for_selector(".finding-lines li")
    screenshots(page, "sessions", folder, ".finding-lines li")

    page.click("nav a[data-view=health]")
    page.wait_for_selector("table.grid")
    health = ok_json(env, "health")
    inject_hour = next(w for w in health["windows"] if (w["op"], w["window"]) == ("inject", "hour"))
    assert inject_hour["count"] >= 1 and health["samples"]
    rows = page.eval_on_selector_all(
        "table.grid tbody tr",
        "rows => rows.map(r => [...r.cells].slice(0, 3).map(c => c.textContent))",
    )
    assert rows == [[w["op"], w["window"], str(w["count"])] for w in health["windows"]]
    assert page.locator("svg.chart rect").count() == len(health["samples"])
    screenshots(page, "health", folder, "svg.chart")

    entries = [e for e in ok_json(env, "list")["entries"] if "pnpm" in e["content"]]
    a, b = entries[0]["id"], entries[1]["id"]
    assert memctl(env, "connect", a, b, "--relation", "depends_on").code == 0
    page.goto(page.url.split("#")[0] + "#/graph/" + a)
    page.wait_for_selector("svg.graph circle")
    assert page.locator("svg.graph circle").count() == 2
    screenshots(page, "graph", folder, "svg.graph")
