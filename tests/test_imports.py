"""Import boundaries (SPEC §1, STYLE 5): the client never imports the daemon, and the pure core
imports no I/O framework. Checked both statically (AST) and at run time (sys.modules)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Daemon, Env, ok_json

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN_IN_CORE = {"zmq", "watchdog", "apscheduler", "sqlite3", "structlog"}


def _modules(path: Path) -> set[str]:
    """The dotted names of the modules ``path`` imports (relative imports as written: none of
    our packages uses them)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _imports(path: Path) -> set[str]:
    """The top-level packages ``path`` imports."""
    return {name.split(".")[0] for name in _modules(path)}


def test_client_never_imports_daemon_statically() -> None:
    for path in (ROOT / "client" / "memctl").rglob("*.py"):
        assert "memoryd" not in _imports(path), path


def test_core_imports_no_io_statically() -> None:
    for path in (ROOT / "daemon" / "memoryd" / "core").rglob("*.py"):
        bad = _imports(path) & FORBIDDEN_IN_CORE
        assert not bad, f"{path} imports {bad}"
        outside = {n for n in _modules(path) if n.split(".")[0] == "memoryd" and not _in_core(n)}
        assert not outside, f"{path} imports {outside}: the core imports only the core"


def _in_core(module: str) -> bool:
    return module == "memoryd.core" or module.startswith("memoryd.core.")


def test_the_core_import_check_sees_dotted_names(tmp_path: Path) -> None:
    """The check above looks at full module names, so ``from memoryd.project import ...`` in the
    core would fail it (a check on top-level names alone cannot tell it from the core's own)."""
    module = tmp_path / "m.py"
    module.write_text("import memoryd.core.entries\nfrom memoryd.project import ProjectMemory\n")
    assert _modules(module) == {"memoryd.core.entries", "memoryd.project"}
    assert [_in_core(m) for m in sorted(_modules(module))] == [True, False]


def _modules_after(code: str) -> set[str]:
    script = code + "\nimport sys; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_client_runtime_import_set_is_small() -> None:
    loaded = _modules_after("import memctl.cli, memctl.transport, memctl.protocol")
    assert not {m for m in loaded if m.split(".")[0] == "memoryd"}
    heavy = {
        "pydantic",
        "structlog",
        "tantivy",
        "watchdog",
        "apscheduler",
        "sqlite3",
        "platformdirs",
        "mcp",
        "tqdm",
    }
    assert not {m.split(".")[0] for m in loaded} & heavy


def test_the_hook_parser_loads_no_introspection() -> None:
    """What the agent's hook builds on every prompt: its parser and command table, without
    ``inspect`` (pulled in by ``dataclasses``), some 5 ms of start-up."""
    loaded = _modules_after(
        "import sys\n"
        "sys.modules['typing_extensions'] = None  # as memctl.launch does\n"
        "from memctl.cli import _parser\n"
        "assert _parser(only_hook=True).parse_args(['hook']).command == 'hook'"
    )
    assert "memctl.commands.agents" in loaded  # the check saw the hook's command table
    assert not {"inspect", "dataclasses"} & loaded


def test_core_runtime_imports() -> None:
    base = ROOT / "daemon" / "memoryd"
    core = sorted(
        ".".join(p.relative_to(base).with_suffix("").parts)
        for p in (base / "core").rglob("*.py")
        if p.stem != "__init__"
    )
    assert len(core) > 20  # the walk found the core's modules, subpackages included
    loaded = _modules_after("\n".join(f"import memoryd.{m}" for m in core))
    assert not {m.split(".")[0] for m in loaded} & FORBIDDEN_IN_CORE


def test_memctl_command_starts_without_typing_extensions_or_the_request_decoder(
    tmp_path: Path,
) -> None:
    """What every hook pays at start: the command marks typing_extensions absent (msgspec falls
    back on typing) and never builds the decoder of every request type (the daemon's side)."""
    code = (
        "import sys\n"
        "sys.argv = ['memctl', 'status']\n"
        "from memctl import launch\n"
        "code = launch.main()\n"
        "from memctl import protocol\n"
        "print(code, sys.modules.get('typing_extensions') is None,"
        " protocol._request_decoder.cache_info().currsize)\n"
    )
    env = {**os.environ, "MEMORYD_SOCKET": str(tmp_path / "absent.sock")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.split() == ["3", "True", "0"]  # daemon unavailable, as it should be here


def test_hook_command_is_found_behind_global_options() -> None:
    from memctl.cli import _command_of, _parser

    assert _command_of(["--project", "hook", "status"]) == "status"  # DIR may be named "hook"
    assert _command_of(["--timeout", "2", "--json", "hook", "--agent", "claude"]) == "hook"
    assert _command_of(["--json"]) is None
    args = _parser(only_hook=True).parse_args(
        ["--json", "--project", "/p", "hook", "--agent", "codex"]
    )
    assert (args.command, args.agent, args.project, args.json) == ("hook", "codex", "/p", True)


SDK_AND_ITS_DEPENDENCIES = {"mcp", "mcp_types", "pydantic", "pydantic_core", "anyio", "starlette"}
# Loaded by the commands that draw progress bars (import, status --wait) when they run.
LOADED_WHEN_USED = SDK_AND_ITS_DEPENDENCIES | {"tqdm"}


def test_only_the_mcp_command_loads_the_mcp_sdk() -> None:
    """Every command's parser (``mcp`` included) and the hook's are built without the MCP SDK or
    pydantic: ``memctl mcp`` imports them when it runs, so no hook pays for them."""
    loaded = _modules_after(
        "import sys\n"
        "sys.modules['typing_extensions'] = None  # as memctl.launch does\n"
        "from memctl.cli import _parser\n"
        "assert _parser().parse_args(['mcp']).command == 'mcp'\n"
        "assert _parser(only_hook=True).parse_args(['hook']).command == 'hook'"
    )
    assert "memctl.commands.agents" in loaded  # the check saw the command that starts it
    assert not {m.split(".")[0] for m in loaded} & LOADED_WHEN_USED


def _launched(tmp_path: Path, argv: list[str], stdin: str, watched: set[str]) -> list[str]:
    """Run memctl's entry point with ``argv`` as an agent runs it (no daemon here) and return
    its exit code and the sorted ``watched`` packages it loaded (a name with a dot counts with
    its submodules; one without, as a top-level package), as the last two printed words."""
    env = {**os.environ, "MEMORYD_SOCKET": str(tmp_path / "absent.sock")}
    code = (
        "import sys\n"
        f"sys.argv = {['memctl', *argv]!r}\n"
        "from memctl import launch\n"
        "try:\n"
        "    code = launch.main()\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        f"watched = {sorted(watched)!r}\n"
        "loaded = {w for w in watched for m in sys.modules\n"
        "          if m == w or m.startswith(w + '.') and '.' in w or m.split('.')[0] == w}\n"
        "print(code, sorted(loaded))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return out.stdout.split()[-2:]


def test_hook_and_other_commands_run_without_the_mcp_sdk(tmp_path: Path) -> None:
    """The commands run through ``memctl.launch`` as an agent runs them (the hook prints
    nothing, the others exit 3) and load neither the SDK nor pydantic, nor tqdm."""
    for argv, stdin, expected_code in (
        (["hook", "--agent", "claude"], '{"hook_event_name": "UserPromptSubmit"}', "0"),
        (["status"], "", "3"),
        (["bank", "list"], "", "3"),
    ):
        got = _launched(tmp_path, argv, stdin, set(LOADED_WHEN_USED))
        assert got == [expected_code, "[]"], argv


UI_STACK = {"starlette", "uvicorn", "anyio", "playwright", "memctl.ui"}


def test_the_hook_and_memctl_start_up_import_nothing_of_the_ui(tmp_path: Path) -> None:
    """``memctl ui``'s parser is built with every other, but the memory browser (memctl.ui) and
    its stack load only when it runs: not for the hook, not for any other command."""
    for argv, stdin, expected_code in (
        (["hook", "--agent", "claude"], '{"hook_event_name": "UserPromptSubmit"}', "0"),
        (["status"], "", "3"),
        (["ui", "--help"], "", "0"),
    ):
        assert _launched(tmp_path, argv, stdin, UI_STACK) == [expected_code, "[]"], argv


def _module_level_imports(path: Path) -> set[str]:
    """What ``path`` imports outside its functions (``from memctl import progress`` counts as
    ``memctl.progress``)."""
    names: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
                names.add(node.module)
            elif isinstance(node, ast.If | ast.Try | ast.With | ast.ClassDef):
                for field in ("body", "orelse", "finalbody", "handlers"):
                    inner = getattr(node, field, [])
                    visit([s for h in inner for s in h.body] if field == "handlers" else inner)

    visit(ast.parse(path.read_text(), str(path)).body)
    return names


def test_tqdm_is_imported_only_when_a_bar_is_drawn(tmp_path: Path) -> None:
    """``memctl.progress`` (tqdm) is imported inside the commands that draw bars, never at a
    module's top: no other command, and not the hook, loads it."""
    for path in (ROOT / "client" / "memctl").rglob("*.py"):
        if path.name != "progress.py":
            found = _module_level_imports(path) & {"tqdm", "memctl.progress"}
            assert not found, f"{path} imports {found} at its top"
    # The check sees a top-level import, in a block too, and not one inside a function.
    module = tmp_path / "m.py"
    module.write_text(
        "try:\n    from memctl import progress\nexcept ImportError:\n    pass\n"
        "def f():\n    import tqdm\n"
    )
    assert _module_level_imports(module) == {"memctl", "memctl.progress"}


# What only the daemon's clients other than the hook need: the hook's own process loads none.
NOT_ON_THE_HOOK_PATH = {
    "zmq",
    "msgspec",
    "argparse",
    "typing",
    "re",
    "json",
    "socket",
    "enum",
    "memctl.cli",
    "memctl.protocol",
    "memctl.transport",
}


@pytest.mark.parametrize("entry", ["main", "hook_main"])
def test_the_hook_answers_without_pyzmq_msgspec_argparse_or_typing(
    env: Env, daemon: Daemon, entry: str
) -> None:
    """``memctl hook`` (``launch.main``) and ``memctl-hook`` (``launch.hook_main``) answer a prompt
    from the real daemon and load none of the above (issue 12: they were most of its time)."""
    ok_json(env, "remember", "Deploys always go through the staging cluster first", "--pin")
    argv = ["memctl", "hook", "--agent", "claude"] if entry == "main" else ["memctl-hook"]
    code = (
        "import sys\n"
        f"sys.argv = {argv!r}\n"
        "from memctl import launch\n"
        f"code = launch.{entry}()\n"
        f"print(code, sorted(set(sys.modules) & {NOT_ON_THE_HOOK_PATH!r}), file=sys.stderr)\n"
    )
    stdin = json.dumps(
        {"hook_event_name": "SessionStart", "source": "startup", "cwd": str(env.project)}
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
        env=env.environ(),
    )
    assert "staging cluster" in json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"]
    assert out.stderr.split() == ["0", "[]"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/maps")
def test_the_daemon_maps_no_tls_library_until_an_llm_request_needs_one(
    env: Env, daemon: Daemon
) -> None:
    """The standard library loads OpenSSL where it can (asyncio, hashlib, hmac): ~4 MB resident
    for TLS and hashes the daemon does without; ``memoryd.cli`` imports them with it marked
    absent, and drops the mark (the LLM endpoint's requests import the real ssl:
    ``test_bank_llm``). What hashes (a project's slug, an entry, the audit chain) still works."""
    assert daemon.proc is not None
    ok_json(env, "remember", "Deploys always go through the staging cluster first")
    assert ok_json(env, "check")["audit"] == "ok"  # the hash chain, verified
    maps = Path(f"/proc/{daemon.proc.pid}/maps").read_text()
    assert "libpython" in maps or "python" in maps  # the file names what the process maps
    assert "_ssl" not in maps and "libssl" not in maps and "libcrypto" not in maps


@pytest.mark.parametrize("transport", ["wire", "pyzmq"])
def test_commands_speak_to_the_daemon_without_pyzmq_unless_told(
    env: Env, daemon: Daemon, transport: str
) -> None:
    """Every command's requests go over ``memctl.zmtp`` (pyzmq's import was a fifth of a
    command's time); ``MEMCTL_TRANSPORT=pyzmq`` sends them through pyzmq, with the same
    answers."""
    code = (
        "import sys\n"
        "from memctl import launch\n"
        "for words in (['remember', 'Deploys go through the staging cluster'],"
        " ['search', 'staging deploys']):\n"
        "    sys.argv = ['memctl', '--json', *words]\n"
        "    assert launch.main() == 0\n"
        "print('zmq' in sys.modules, file=sys.stderr)\n"
    )
    extra = {"MEMCTL_TRANSPORT": "pyzmq"} if transport == "pyzmq" else {}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=env.environ() | extra,
        cwd=env.project,
    )
    remembered, found = (json.loads(line) for line in out.stdout.splitlines())
    assert [hit["id"] for hit in found["results"]] == [remembered["id"]]
    assert out.stderr.split() == [str(transport == "pyzmq")]
