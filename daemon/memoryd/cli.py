"""``memoryd``: run the daemon in the foreground, install it as a user service, show the config."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from memctl import __version__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memoryd", description=__doc__)
    parser.add_argument("--version", action="version", version=f"memoryd {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the daemon in the foreground (JSON logs on stderr)")
    run.add_argument(
        "--config", type=Path, help="config file (default $XDG_CONFIG_HOME/memoryd/config.toml)"
    )
    run.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    for name, text in (("install-service", "install"), ("uninstall-service", "remove")):
        cmd = sub.add_parser(name, help=f"{text} the systemd user unit / launchd agent")
        cmd.add_argument(
            "--dry-run", action="store_true", help="print what would be done, change nothing"
        )
    sub.add_parser("config-example", help="print every setting with its default, as TOML")
    check = sub.add_parser(
        "check-config",
        help="check the configuration and print every setting in effect with where it came "
        "from (default, file, environment)",
    )
    check.add_argument("--config", type=Path, help="config file (default as for run)")
    check.add_argument("--json", action="store_true", help="one JSON object")
    return parser


def entry() -> NoReturn:
    """The ``memoryd`` command (its console script): ``main``, then the exit without the
    interpreter's teardown (``memctl.launch.leave``): ~135 ms of CPU at every stop of the
    daemon, after its threads have ended and its files are closed."""
    from memctl.launch import leave

    leave(main())


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "run":
        return _run(args)
    if args.command == "check-config":
        return _check_config(args)
    if args.command == "config-example":
        from memoryd.config import render_example

        sys.stdout.write(render_example())
        return 0
    return _service(args.command, args.dry_run)


def _run(args: argparse.Namespace) -> int:
    _without_openssl()
    from memoryd import app
    from memoryd.config import ConfigError
    from memoryd.runtime import AlreadyRunning, UnsafeRuntimeDir

    overrides = {"logging": {"level": args.log_level}} if args.log_level else {}
    try:
        return app.run(args.config, overrides)
    except ConfigError as exc:
        print(f"memoryd: {exc}", file=sys.stderr)
        return 2
    except (AlreadyRunning, UnsafeRuntimeDir) as exc:
        print(f"memoryd: {exc}", file=sys.stderr)
        return 1


def _without_openssl() -> None:
    """Import the standard library's modules that load OpenSSL when they can, with it marked
    absent (``ssl``, ``_hashlib``), then drop the marks. Our dependencies import them (structlog
    and APScheduler asyncio, pydantic hmac through secrets) and our code hashlib, for nothing
    OpenSSL adds here: no TLS (a Unix socket) and hashes the builtin modules have (sha256,
    blake2b); it costs ~4 MB of the daemon's resident memory. Each module takes the absence by
    design: asyncio refuses TLS connections, hashlib and hmac use the builtin hashes. Anything
    importing ssl later gets the real one: the optional LLM endpoint's requests (urllib).

    A Python built with blake2 as its only builtin hash (``--with-builtin-hashlib-hashes``)
    has sha256 from OpenSSL alone: there hashlib keeps it."""
    import importlib.util

    absent = ["ssl"]
    if any(importlib.util.find_spec(name) for name in ("_sha256", "_sha2")):  # 3.11, 3.12+
        absent.append("_hashlib")
    marked = [name for name in absent if name not in sys.modules]
    for name in marked:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        import asyncio  # noqa: F401
        import hashlib  # noqa: F401
        import hmac  # noqa: F401
    finally:
        for name in marked:
            del sys.modules[name]


def _check_config(args: argparse.Namespace) -> int:
    """Exit 2 with the reason when the configuration would stop ``memoryd run``; otherwise 0
    and the effective configuration."""
    import json
    import os

    from memoryd.config import ConfigError, effective, load, render_effective

    try:
        settings = load(args.config)
    except ConfigError as exc:
        print(f"memoryd: {exc}", file=sys.stderr)
        return 2
    origins = effective(settings, args.config, os.environ)
    if args.json:
        nested: dict[str, dict[str, object]] = {}
        for o in origins:
            nested.setdefault(o.section, {})[o.key] = {"value": o.value, "source": o.source}
        print(json.dumps(nested, indent=2))
    else:
        sys.stdout.write(render_effective(origins, args.config))
    return 0


def _service(command: str, dry_run: bool) -> int:
    from memoryd import service_install

    try:
        plan = service_install.plan()
    except (FileNotFoundError, ValueError) as exc:  # not installed; a path systemd refuses
        print(f"memoryd: {exc}", file=sys.stderr)
        return 1
    if command == "install-service":
        if dry_run:
            print(f"# would write {plan.path}\n{plan.content}")
        else:
            service_install.install(plan)
            print(f"wrote {plan.path}")
        print(f"enable it with:\n  {plan.enable_command}")
        return 0
    if dry_run:
        print(f"# would remove {plan.path}")
    elif service_install.uninstall(plan):
        print(f"removed {plan.path}")
    else:
        print(f"nothing to remove at {plan.path}")
    print(f"stop it with:\n  {plan.disable_command}")
    return 0
