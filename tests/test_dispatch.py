"""Every request type has exactly one handler; every handler documents itself."""

from __future__ import annotations

from memctl import protocol
from memoryd.server.handlers import HANDLERS, MUTATING


def test_every_request_type_has_one_handler() -> None:
    assert set(HANDLERS) == set(protocol.REQUEST_TYPES)
    assert len(set(HANDLERS.values())) == len(HANDLERS)
    assert set(protocol.REQUEST_TYPES) == set(protocol.AnyRequest.__args__)


def test_mutating_requests_are_known_requests() -> None:
    assert set(HANDLERS) >= MUTATING


def test_request_types_carry_help() -> None:
    for request_type in protocol.REQUEST_TYPES:
        assert request_type.__doc__ and request_type.__doc__.strip(), request_type


def test_op_tags_are_unique_and_match_spec_names() -> None:
    tags = [t.__struct_config__.tag for t in protocol.REQUEST_TYPES]
    assert len(tags) == len(set(tags))
    spec_ops = {
        "hello",
        "status",
        "remember",
        "forget",
        "pin",
        "unpin",
        "list",
        "search",
        "import",
        "export",
        "audit_tail",
        "check",
        "shutdown",
        "inject",
        "budget",
        "alias_add",
        "alias_list",
        "alias_remove",
        "hook",
        "auto",
        "preset",
        "episodes",
        "bank_init",
        "bank_validate",
        "bank_read",
        "bank_write",
        "bank_update",
        "bank_list",
        "bank_activate",
        "bank_process",
        "bank_sync",  # beyond the SPEC list: flush the bank cache now (issue 5, seed 002)
        "bank_optimise",  # beyond the SPEC list: the optimiser of SPEC §10 Bank budget
        "projects",
        "files_show",
        "files_list",
        "files_refresh",
        "save_memory",
        "ingest_lifecycle",
    }
    assert set(tags) == spec_ops
