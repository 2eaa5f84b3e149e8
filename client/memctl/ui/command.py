"""``memctl ui``: serve the memory browser on 127.0.0.1 and print (and open) its address."""

from __future__ import annotations

import secrets
import socket
import sys

from memctl import protocol
from memctl.cli import EXIT_USAGE, Failed, Session


def cmd_ui(s: Session) -> None:
    # memctl.launch marks typing_extensions absent for the hook's start-up; Starlette and
    # uvicorn need it (as the MCP server does).
    if "typing_extensions" in sys.modules and sys.modules["typing_extensions"] is None:
        del sys.modules["typing_extensions"]
    try:
        import uvicorn

        from memctl.ui.app import Backend, build_app
    except ImportError as exc:
        raise Failed(
            f"the memory browser needs its extra ({exc.name} is missing): "
            "pip install 'memoryd[ui]'",
            EXIT_USAGE,
        ) from None
    port = s.args.port
    if not 0 <= port <= 65535:
        raise Failed(f"--port must be 0-65535, not {port}", EXIT_USAGE)
    s.call(protocol.Hello())  # the daemon answers: say so now rather than on the first page
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))  # loopback only, never a wider address
    except OSError as exc:
        raise Failed(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}", EXIT_USAGE) from None
    listener.listen(128)  # connections wait in the backlog until the server accepts them
    port = listener.getsockname()[1]
    token = secrets.token_urlsafe(24)
    backend = Backend(project=s.project, explicit=bool(s.args.project), budget_s=s.args.timeout)
    app = build_app(backend, token=token, port=port)
    url = f"http://127.0.0.1:{port}/?token={token}"
    print(f"memory browser: {url}", flush=True)
    print("stop it with Ctrl-C", file=sys.stderr, flush=True)
    if not s.args.no_browser:
        import webbrowser

        webbrowser.open(url)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[listener])
    finally:
        backend.close()
        listener.close()
