"""The ``memctl`` command's entry point: an agent hook runs it on every prompt, so its start-up
is the hook's latency.

``memctl hook`` goes straight to ``memctl.hook``, which needs neither argparse nor msgspec nor
pyzmq (it falls back to ``memctl.cli`` for a command line it does not take apart for certain).

msgspec imports ``typing_extensions`` when it is installed (the daemon's pydantic brings it into
the same environment) only to prefer it over ``typing``, which on Python 3.11 has everything
msgspec needs; loading it costs some 10 ms of every start. The command marks it absent in its own
process before anything is imported. Only here: the daemon, and anything importing ``memctl``
as a library, load it as usual. A future command that needs it (an MCP server on pydantic) must
remove the mark before importing.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not ``typing.TYPE_CHECKING``: importing typing would import ``re``
if TYPE_CHECKING:
    from typing import NoReturn

GLOBAL_OPTIONS_WITH_VALUE = frozenset({"--project", "--timeout"})


def main() -> int:
    sys.modules.setdefault("typing_extensions", None)  # type: ignore[arg-type]
    words = sys.argv[1:]
    if command_of(words) == "hook":
        from memctl.hook import run_words

        return run_words(words)
    from memctl.cli import main as cli_main

    return cli_main(words)


def hook_main() -> int:
    """``memctl-hook``: ``memctl hook`` without the command word (and without pip's wrapper,
    scripts/memctl-hook)."""
    sys.modules.setdefault("typing_extensions", None)  # type: ignore[arg-type]
    from memctl.hook import run_words

    return run_words(["hook", *sys.argv[1:]])


def entry() -> NoReturn:
    """The ``memctl`` command (its console script): ``main``, then ``leave``."""
    leave(main())


def leave(code: int) -> NoReturn:
    """Exit with ``code`` once the command is done, without the interpreter's teardown: it frees
    every module and object one by one, ~20 ms of CPU after a ``memctl`` command and ~135 ms
    after the daemon's clean stop (its ~500 modules), for nothing a process about to end needs.

    Only what the teardown would still do for us is done: stdout and stderr flushed. Output that
    cannot be written is an error, as at a normal exit (120 for a command that had succeeded; a
    failing one keeps its code), unless the reader has gone (a pipe closed by ``head``); a
    stream that is closed, or None (a descriptor closed at start-up), is passed over. A thread
    still running (a server's) gets the normal exit, which waits for it. Sockets need nothing:
    the client's have LINGER 0 and wait for their reply."""
    threading = sys.modules.get("threading")  # not imported: no thread was started
    if threading is not None and threading.active_count() > 1:
        sys.exit(code)
    try:
        if sys.stdout is not None and not sys.stdout.closed:
            sys.stdout.flush()
    except BrokenPipeError:
        pass
    except (OSError, ValueError) as exc:
        _say(f"cannot write the output: {exc}")
        code = code or 120
    _say("")
    os._exit(code)


def _say(text: str) -> None:
    """``text`` on stderr (a line; nothing: a flush), if stderr takes it."""
    try:
        if sys.stderr is not None and not sys.stderr.closed:
            if text:
                sys.stderr.write(text + "\n")
            sys.stderr.flush()
    except Exception:  # nowhere left to say it
        pass


def command_of(argv: list[str]) -> str | None:
    """The command word of ``argv`` (the first argument that is not a global option)."""
    words = iter(argv)
    for word in words:
        if word in GLOBAL_OPTIONS_WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None
