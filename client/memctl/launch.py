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

import sys

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


def command_of(argv: list[str]) -> str | None:
    """The command word of ``argv`` (the first argument that is not a global option)."""
    words = iter(argv)
    for word in words:
        if word in GLOBAL_OPTIONS_WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None
