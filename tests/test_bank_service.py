"""The bank service's LLM wiring: configured only when asked, key from the environment, text
redacted before it leaves, rules when the endpoint fails."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from memoryd.background import BackgroundErrors
from memoryd.banks.cache import BankCache
from memoryd.banks.journal import BankJournal
from memoryd.banks.llm import LlmFailure
from memoryd.banks.service import BankService, build_llm
from memoryd.banks.writer import FlushJob
from memoryd.config import BanksSettings, StorageSettings
from memoryd.core.bank.router import ProcessedItem
from memoryd.instructions.loader import InstructionConfig
from memoryd.registry import ProjectRegistry

# Not AWS's documented AKIAIOSFODNN7EXAMPLE: redaction keeps that placeholder as it is.
SECRET = "AKIA" + "QZ7RT2WX4YB6NC8P"


class RecordingLlm:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def request_items(self, text: str, now: datetime | None = None) -> list[ProcessedItem]:
        self.seen.append(text)
        raise LlmFailure("connection", "refused")


def test_llm_only_when_configured_and_key_from_environment() -> None:
    assert build_llm(BanksSettings(), {}) is None
    settings = BanksSettings(
        llm_base_url="http://127.0.0.1:9/v1", llm_model="m", llm_api_key_env="MY_KEY"
    )
    llm = build_llm(settings, {"MY_KEY": "sk-test"})
    assert llm is not None and "sk-test" not in repr(llm)
    assert llm._api_key == "sk-test"


def test_text_is_redacted_before_the_llm_and_rules_take_over(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    jobs: list[FlushJob] = []
    errors = BackgroundErrors()
    registry = ProjectRegistry(tmp_path / "data", StorageSettings(), errors)
    llm = RecordingLlm()
    journal = BankJournal(tmp_path / "bank-journal.jsonl")
    cache = BankCache(journal, jobs.append, errors, conflicts_dir=tmp_path / "conflicts")
    service = BankService(
        registry,
        InstructionConfig.from_environ({"HOME": str(tmp_path)}),
        cache,
        llm=llm,  # type: ignore[arg-type]
    )
    try:
        result = service.process(
            str(project), f"We decided to rotate the key {SECRET}.", apply=False, mode=None
        )
    finally:
        registry.close()
        journal.close()
    assert jobs == []  # nothing to write: the text was only routed
    assert llm.seen and SECRET not in llm.seen[0]
    assert result.source == "rules" and result.fallback_reason == "connection: refused"
    assert result.items and all(SECRET not in item.content for item in result.items)
