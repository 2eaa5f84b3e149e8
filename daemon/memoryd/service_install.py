"""``memoryd install-service`` / ``uninstall-service``: fill the systemd unit or launchd plist
template with the installed paths and say the one command that enables it (design §12)."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from xml.sax.saxutils import escape as xml_escape

from memoryd.atomic import write_atomic

LAUNCHD_LABEL = "io.memoryd.daemon"
_TEMPLATES = {"systemd": "memoryd.service", "launchd": f"{LAUNCHD_LABEL}.plist"}


@dataclass(frozen=True)
class ServicePlan:
    kind: str  # "systemd" | "launchd"
    path: Path
    content: str
    enable_command: str
    disable_command: str


def _template(kind: str) -> str:
    name = _TEMPLATES[kind]
    packaged = resources.files("memoryd") / "service_templates" / name
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    # Editable install: the templates are at the top of the source tree.
    return (Path(__file__).resolve().parents[2] / kind / name).read_text(encoding="utf-8")


def memoryd_executable() -> str:
    found = shutil.which("memoryd")
    candidate = Path(sys.executable).with_name("memoryd")
    if candidate.exists():
        return str(candidate)
    if found:
        return str(Path(found).resolve())
    raise FileNotFoundError("cannot find the installed `memoryd` executable on PATH")


def systemd_quote(value: str, *, executable: bool = False) -> str:
    """One argument of a unit file's command line: double-quoted with C escapes and ``%`` (a
    specifier) doubled; ``$`` (a variable) doubled in an argument. systemd refuses an executable
    path holding ``$``, a quote or a backslash (systemd-analyze: "Executable name contains special
    characters"), so such a path is refused here, with the reason, instead of writing a unit that
    will not start."""
    bad = sorted({c for c in value if c in "$'\"\\"})
    if executable and bad:
        raise ValueError(
            f"systemd cannot start an executable whose path contains {' '.join(bad)}: {value} "
            "(install memoryd where its path has none of them)"
        )
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped.replace("%", "%%").replace("$", "$$") + '"'


def plan(
    platform: str = sys.platform, home: Path | None = None, exe: str | None = None
) -> ServicePlan:
    home = home or Path.home()
    exe = exe or memoryd_executable()
    if platform == "darwin":
        path = home / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
        log_dir = home / "Library" / "Logs"
        content = (
            _template("launchd")
            .replace("@EXEC@", xml_escape(exe))
            .replace("@LOG_DIR@", xml_escape(str(log_dir)))
        )
        domain = f"gui/{os.getuid()}"
        return ServicePlan(
            "launchd",
            path,
            content,
            f"launchctl bootstrap {domain} {path}",
            f"launchctl bootout {domain}/{LAUNCHD_LABEL}",
        )
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    path = config_home / "systemd" / "user" / "memoryd.service"
    content = _template("systemd").replace("@EXEC@", systemd_quote(exe, executable=True))
    return ServicePlan(
        "systemd",
        path,
        content,
        "systemctl --user daemon-reload && systemctl --user enable --now memoryd",
        "systemctl --user disable --now memoryd",
    )


def install(service: ServicePlan) -> None:
    service.path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(service.path, service.content.encode(), mode=0o644)


def uninstall(service: ServicePlan) -> bool:
    if not service.path.exists():
        return False
    service.path.unlink()
    return True
