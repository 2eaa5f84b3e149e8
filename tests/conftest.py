"""Test harness: the real daemon, on a private socket with private XDG directories, driven by
the real client. A daemon is ready when ``hello`` answers; nothing here sleeps for a fixed time."""

from __future__ import annotations

import compileall
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from memctl import protocol
from memctl.launch import command_of
from memctl.transport import Client, DaemonUnavailable

BIN = Path(sys.executable).parent
TEST_BUDGET_S = 10.0  # a memctl command's, in tests (``memctl``)
START_DEADLINE_S = 30.0

# Hypothesis's per-example deadline (200 ms) measures the machine, not the code: on a busy CI
# machine an example is descheduled for longer than that. Every test has pytest-timeout instead.
settings.register_profile("memoryd", deadline=None)
settings.load_profile("memoryd")


def pytest_configure(config: pytest.Config) -> None:
    """Bytecode for memoryd and memctl, once, before any worker starts: an installed package has
    it (pip compiles on install), an editable checkout run under PYTHONDONTWRITEBYTECODE (set on
    this project's machines) does not: every daemon and ``memctl`` a test starts would compile
    them again (~0.25 s of CPU a daemon start, hundreds of starts a run)."""
    if hasattr(config, "workerinput"):
        return  # a pytest-xdist worker: the controller has done it
    for package in ("memctl", "memoryd"):
        spec = importlib.util.find_spec(package)  # where it is installed from, not imported
        assert spec is not None and spec.origin is not None, package
        compileall.compile_dir(Path(spec.origin).parent, quiet=1)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        default=os.environ.get("MEMORYD_FULL", "") not in ("", "0"),
        help="run the long durability streams (tests marked slow) at full length; "
        "also MEMORYD_FULL=1. By default they run a shorter stream from the same seed.",
    )


@pytest.fixture(scope="session")
def full(request: pytest.FixtureRequest) -> bool:
    """Whether this run is the full one (``--full`` or ``MEMORYD_FULL=1``)."""
    return bool(request.config.getoption("--full"))


@dataclass
class Env:
    """Private XDG directories, socket and a project directory for one test."""

    root: Path
    vars: dict[str, str] = field(default_factory=dict)

    @property
    def socket(self) -> Path:
        return Path(self.vars["MEMORYD_SOCKET"])

    @property
    def project(self) -> Path:
        return self.root / "project"

    @property
    def data(self) -> Path:
        return Path(self.vars["XDG_DATA_HOME"]) / "memoryd"

    @property
    def home(self) -> Path:
        return Path(self.vars["HOME"])

    @property
    def state(self) -> Path:
        return Path(self.vars["XDG_STATE_HOME"]) / "memoryd"

    def environ(self) -> dict[str, str]:
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("MEMORYD_", "XDG_", "HOME"))
        }
        env.update(self.vars)
        return env


def make_env(root: Path) -> Env:
    # ipc paths must stay under ~100 bytes, so the socket lives in a short runtime dir.
    run = Path(f"/tmp/mdt-{os.getpid()}-{abs(hash(str(root))) % 10**8}")
    env = Env(root)
    for name in ("DATA", "STATE", "CONFIG", "CACHE"):
        (root / name.lower()).mkdir(parents=True, exist_ok=True)
        env.vars[f"XDG_{name}_HOME"] = str(root / name.lower())
    env.vars["XDG_RUNTIME_DIR"] = str(run)
    env.vars["MEMORYD_SOCKET"] = str(run / "memoryd" / "memoryd.sock")
    env.vars["MEMORYD_JOBS__INDEX_COMMIT_S"] = "1"
    # A private home: the default capture roots (~/.claude/projects, …) point inside it, so no
    # test ever reads a developer's real transcripts.
    env.vars["HOME"] = str(root / "home")
    # As on a machine where the agents are installed: their transcript folders exist.
    for folder in (".claude/projects", ".codex/sessions", ".gemini/tmp"):
        (root / "home" / folder).mkdir(parents=True)
    env.project.mkdir()
    (env.project / ".git").mkdir()
    return env


class Daemon:
    """A real ``memoryd run`` subprocess."""

    def __init__(self, env: Env, extra: dict[str, str] | None = None) -> None:
        self.env = env
        self.extra = extra or {}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, wait: bool = True) -> Daemon:
        environ = self.env.environ() | self.extra
        self.stderr_path = self.env.root / f"daemon-{time.monotonic_ns()}.log"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [str(BIN / "memoryd"), "run"],
            env=environ,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, deadline_s: float = START_DEADLINE_S) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + deadline_s
        with Client(endpoint="ipc://" + str(self.env.socket)) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"daemon exited with {self.proc.returncode}:\n{self.log()}")
                try:
                    reply = client.call(protocol.Hello(), budget_s=0.5)
                except DaemonUnavailable:
                    # The socket file appears when the daemon binds; wait for it without sleeping
                    # blindly: poll the process with a short timeout instead.
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self.proc.wait(timeout=0.05)
                    continue
                if isinstance(reply, protocol.Ok):
                    return
        raise TimeoutError(f"daemon not ready within {deadline_s}s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._stderr.close()

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self) -> object:
        return json.loads(self.stdout)


def memctl(
    env: Env, *args: str, stdin: str | None = None, cwd: Path | None = None, timeout: float = 60
) -> Result:
    """Run the real ``memctl`` with the test's environment, in the project directory.

    A command is given ``--timeout`` 10 s unless it names its own, or is the hook (whose budget
    is its contract): its default budget (1.5 s) is the user's, and on a CI machine whose two
    cores the other test worker keeps busy, a daemon can be descheduled for longer than that.
    What the budget does is tested with it named (tests/test_client_unavailable.py)."""
    if "--timeout" not in args and command_of(list(args)) != "hook":
        args = ("--timeout", str(TEST_BUDGET_S), *args)
    proc = subprocess.run(
        [str(BIN / "memctl"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env.environ(),
        cwd=cwd or env.project,
        timeout=timeout,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


UNTIL_DEADLINE_S = 30.0


def until(check: Callable[[], Any], what: str, deadline_s: float = UNTIL_DEADLINE_S) -> Any:
    """Ask ``check`` again and again (each time a real round trip or file read, never a sleep)
    until it returns something true, and return that; fail after ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        # Not a sleep: hand the core to the daemon when it is waiting to run (two cores, and a
        # check that only reads a file would otherwise hold one of them).
        os.sched_yield()
    raise AssertionError(f"not within {deadline_s}s: {what}")


# Scores within this fraction of each other count as tied: a rebuilt or upgraded index may order
# them either way. (tantivy keeps deleted documents in its BM25 statistics until segments merge,
# so an index that grew by commits and one rebuilt in one go give the same ranking with scores a
# few per cent apart.)
SCORE_TIE = 0.05


def assert_same_ranking(before: list[dict], after: list[dict], tie: float = SCORE_TIE) -> None:
    """The promise of search across an index rebuild: the same results, in the same order, with
    the same fields; only the score may move. Results whose scores were within ``tie`` of each
    other (relative) may come back in either order among themselves."""

    def fields(results: list[dict]) -> dict[str, dict]:
        return {r["id"]: {k: v for k, v in r.items() if k != "score"} for r in results}

    assert fields(after) == fields(before)
    assert all(r["score"] > 0 for r in after)
    groups: list[list[str]] = []  # runs of near-equal scores, in ranked order
    for previous, result in zip([None, *before], before, strict=False):
        if previous is not None and previous["score"] - result["score"] <= tie * previous["score"]:
            groups[-1].append(result["id"])
        else:
            groups.append([result["id"]])
    ranked = [r["id"] for r in after]
    position = 0
    for group in groups:
        got = ranked[position : position + len(group)]
        assert sorted(got) == sorted(group), f"ranking changed: {ranked} after, {groups} before"
        position += len(group)


def ok_json(env: Env, *args: str, stdin: str | None = None) -> dict:
    result = memctl(env, "--json", *args, stdin=stdin)
    assert result.code == 0, f"memctl {args} exited {result.code}: {result.stderr}"
    return json.loads(result.stdout)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = make_env(tmp_path)
    yield e
    import shutil

    shutil.rmtree(e.vars["XDG_RUNTIME_DIR"], ignore_errors=True)


@pytest.fixture
def daemon(env: Env) -> Iterator[Daemon]:
    d = Daemon(env).start()
    yield d
    d.stop()


@pytest.fixture
def home(env: Env, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's home, for installing into agents' settings: the variables that point an agent
    elsewhere (CLAUDE_CONFIG_DIR, CODEX_HOME, GEMINI_CLI_HOME) unset."""
    for var in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME"):
        monkeypatch.delenv(var, raising=False)
    path = env.root / "home"
    path.mkdir(exist_ok=True)
    env.vars["HOME"] = str(path)
    return path
