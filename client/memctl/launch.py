"""The ``memctl`` command's entry point: an agent hook runs it on every prompt, so its start-up
is the hook's latency.

msgspec imports ``typing_extensions`` when it is installed (the daemon's pydantic brings it into
the same environment) only to prefer it over ``typing``, which on Python 3.11 has everything
msgspec needs; loading it costs some 10 ms of every start. The command marks it absent in its own
process before anything is imported. Only here: the daemon, and anything importing ``memctl``
as a library, load it as usual. A future command that needs it (an MCP server on pydantic) must
remove the mark before importing.
"""

from __future__ import annotations

import sys


def main() -> int:
    sys.modules.setdefault("typing_extensions", None)  # type: ignore[arg-type]
    from memctl.cli import main as cli_main

    return cli_main()
