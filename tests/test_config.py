"""Configuration: the example file equals the model; precedence CLI > env > file > defaults."""

from __future__ import annotations

import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import Daemon, make_env, ok_json, until
from memoryd import config

ROOT = Path(__file__).resolve().parents[1]


def test_example_file_equals_model() -> None:
    assert (ROOT / "config.example.toml").read_text() == config.render_example()


def test_example_file_parses_to_the_defaults(tmp_path: Path) -> None:
    parsed = tomllib.loads((ROOT / "config.example.toml").read_text())
    assert parsed == config.Settings().model_dump()
    assert config.load(ROOT / "config.example.toml") == config.Settings()


def test_every_setting_is_documented() -> None:
    for section in config.Settings.model_fields.values():
        for name, field in section.annotation.model_fields.items():
            assert field.description, name


def test_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[logging]\nlevel = "warning"\n[storage]\naudit_max_events = 9000\n')
    assert config.load(path).logging.level == "warning"
    monkeypatch.setenv("MEMORYD_LOGGING__LEVEL", "error")
    loaded = config.load(path)
    assert loaded.logging.level == "error" and loaded.storage.audit_max_events == 9000
    assert config.load(path, logging={"level": "debug"}).logging.level == "debug"


def test_defaults_without_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert config.load() == config.Settings()


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("[storage]\naudit_trim_to = 6000\n", "audit_trim_to must be below"),
        ("[logging]\nlevel = 'loud'\n", "level"),
        ("[retreival]\ntop_k = 3\n", "unknown section \\[retreival\\]; did you mean 'retrieval'"),
        ("[nonsense]\nx = 1\n", "unknown section \\[nonsense\\]$"),
        ("[storage\n", "invalid configuration"),
        ("[storage]\nunknown_key = 1\n", "unknown key 'unknown_key' in \\[storage\\]"),
        ("[storage]\naudit_max_event = 1\n", "did you mean 'audit_max_events'"),
    ],
)
def test_invalid_values_are_clear(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(config.ConfigError, match=fragment):
        config.load(path)


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match="does not exist"):
        config.load(tmp_path / "absent.toml")


def test_plan_reload_names_what_applies_live_and_what_needs_a_restart() -> None:
    running = config.Settings()
    fresh = config.Settings.model_validate(
        {
            "retrieval": {"budget_ceiling": 1234, "top_k": 7},
            "slo": {"degrade_above_ms": 500.0},
            "logging": {"level": "debug"},
            "jobs": {"quarantine_check_s": 60.0},
            "capture": {"preset": "aggressive", "enabled": False},
            "banks": {"sync_interval_s": 5.0, "llm_model": "m"},
            "storage": {"index_heap_mb": 32},
            "server": {"reply_cache_size": 10},
        }
    )
    plan = config.plan_reload(running, fresh)
    assert set(plan.applied) == {
        "retrieval.budget_ceiling",
        "retrieval.top_k",
        "slo.degrade_above_ms",
        "logging.level",
        "jobs.quarantine_check_s",
        "capture.preset",
        "banks.sync_interval_s",
    }
    assert set(plan.needs_restart_for) == {
        "capture.enabled",
        "banks.llm_model",
        "storage.index_heap_mb",
        "server.reply_cache_size",
    }
    assert config.plan_reload(running, config.Settings()) == config.Reload((), ())


def test_an_invalid_environment_override_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[logging]\nlevel = 'info'\n")
    monkeypatch.setenv("MEMORYD_CAPTURE__ENABLED", "maybe")
    with pytest.raises(config.ConfigError) as raised:
        config.load(path)
    message = str(raised.value)
    assert (
        "capture.enabled" in message and "environment variable MEMORYD_CAPTURE__ENABLED" in message
    )
    assert str(path) not in message  # the file is not to blame


def test_check_config_prints_each_value_with_its_origin(tmp_path: Path) -> None:
    """``memoryd check-config``: the effective configuration, each value with where it came
    from; a configuration ``memoryd run`` would refuse exits 2 with the same reason."""
    import json
    import os
    import subprocess
    import sys

    memoryd = str(Path(sys.executable).parent / "memoryd")
    file = tmp_path / "config.toml"
    file.write_text("[retrieval]\ninject_top_n = 7\n[capture]\nidle_minutes = 5\n")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    environ |= {"MEMORYD_CAPTURE__IDLE_MINUTES": "9", "XDG_CONFIG_HOME": str(tmp_path / "none")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [memoryd, "check-config", *args], capture_output=True, text=True, env=environ
        )

    shown = run("--config", str(file))
    assert shown.returncode == 0, shown.stderr
    assert f"inject_top_n = 7  # {file}" in shown.stdout
    assert (
        "idle_minutes = 9.0  # environment variable MEMORYD_CAPTURE__IDLE_MINUTES" in shown.stdout
    )
    assert 'preset = "balanced"  # default' in shown.stdout
    as_json = json.loads(run("--config", str(file), "--json").stdout)
    assert as_json["retrieval"]["inject_top_n"] == {"value": 7, "source": str(file)}
    assert as_json["capture"]["idle_minutes"]["value"] == 9.0

    file.write_text("[retreival]\n")
    refused = run("--config", str(file))
    assert refused.returncode == 2 and "did you mean 'retrieval'" in refused.stderr


def test_a_config_nested_too_deeply_is_a_clear_error(tmp_path: Path) -> None:
    """Proves that a config file holding a 5,000-deep TOML array is refused with a clear error,
    not a traceback: ``check-config`` and ``run`` exit 2 naming the file, and a running daemon
    asked to reload it (SIGHUP) keeps its settings, says why, and keeps serving. On main
    tomllib's RecursionError escaped as a traceback (exit 1)."""
    env = make_env(tmp_path)
    file = env.root / "config" / "memoryd" / "config.toml"
    file.parent.mkdir(parents=True)
    deep = "[retrieval]\ntop_k = " + "[" * 5000 + "]" * 5000 + "\n"
    why = f"invalid configuration ({file}): arrays or tables nested too deeply to read"
    memoryd = str(Path(sys.executable).parent / "memoryd")
    daemon = Daemon(env).start()
    try:
        file.write_text(deep)
        daemon.proc.send_signal(signal.SIGHUP)
        until(lambda: '"reload_failed"' in daemon.log(), "the reload is refused")
        assert why in daemon.log()
        assert ok_json(env, "status")["daemon"]["pid"] == daemon.proc.pid
    finally:
        assert daemon.stop() == 0
    assert "Traceback" not in daemon.stderr_path.read_text()
    for command in ("check-config", "run"):
        refused = subprocess.run(
            [memoryd, command], capture_output=True, text=True, env=env.environ(), timeout=60
        )
        assert refused.returncode == 2 and why in refused.stderr, refused
        assert "Traceback" not in refused.stderr
