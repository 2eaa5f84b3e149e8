"""One operation, one place: each request type declares its result type and whether it mutates;
the daemon has exactly one handler for it and memctl a command that sends it. Adding a request
type without the other three fails here."""

from __future__ import annotations

import argparse
import inspect
import typing

import msgspec
import pytest

from memctl import protocol
from memctl.commands import Commands
from memoryd.server import handlers
from memoryd.server.context import Deferred, Parked
from memoryd.server.handlers import HANDLERS


def _commands() -> Commands:
    parser = argparse.ArgumentParser()
    commands = Commands(parser.add_subparsers(dest="command"))
    commands.register_all()
    return commands


def test_every_request_type_has_one_handler() -> None:
    assert set(HANDLERS) == set(protocol.REQUEST_TYPES)
    assert len(set(HANDLERS.values())) == len(HANDLERS)


def test_every_request_type_has_a_cli_command() -> None:
    sent = {t for sends in _commands().sends.values() for t in sends}
    missing = set(protocol.REQUEST_TYPES) - sent
    assert not missing, f"no memctl command sends {sorted(t.__name__ for t in missing)}"


def test_every_request_type_has_a_result_type_its_handler_returns() -> None:
    for request_type in protocol.REQUEST_TYPES:
        result_type = request_type.result_type
        assert issubclass(result_type, msgspec.Struct), request_type
        handler = HANDLERS[request_type]
        hints = typing.get_type_hints(handler, vars(inspect.getmodule(handler)))
        assert hints["req"] is request_type, handler
        assert _answers(hints["return"]) - {Parked} == {result_type}, (
            request_type,
            hints["return"],
        )


def _answers(hint: object) -> set[object]:
    """What a handler's return annotation can answer with: a read a reader thread serves
    (``Deferred[Read, Answer]``) answers with its ``Answer``."""
    if typing.get_origin(hint) is Deferred:
        return {typing.get_args(hint)[1]}
    members = typing.get_args(hint)
    return set().union(*(_answers(m) for m in members)) if members else {hint}


def test_the_checks_above_can_fail() -> None:
    """A request type declared without the rest is caught: the table and the commands miss it."""

    class Orphan(protocol.Request[protocol.HelloResult], tag="orphan_for_test"):
        """A request nobody handles."""

    try:
        assert Orphan in protocol._request_types()
        assert Orphan not in HANDLERS
        assert Orphan not in {t for s in _commands().sends.values() for t in s}
        assert Orphan.result_type is protocol.HelloResult
    finally:
        # msgspec and Python keep the subclass alive otherwise; later tests derive from the
        # module-level tuple, which was computed before this class existed.
        del Orphan


def test_mutating_requests_are_derived_from_the_request_types() -> None:
    assert {t for t in protocol.REQUEST_TYPES if t.mutates} == protocol.MUTATING
    # What the reply cache must cover: every change to memory, never a pure read.
    assert protocol.Remember in protocol.MUTATING and protocol.Hook in protocol.MUTATING
    assert protocol.Search not in protocol.MUTATING and protocol.BankRead not in protocol.MUTATING


def test_handlers_are_grouped_by_domain_without_overlap() -> None:
    seen: set[type] = set()
    for domain in handlers.DOMAINS:
        assert not seen & set(domain.HANDLERS), domain
        seen |= set(domain.HANDLERS)
    assert seen == set(HANDLERS)


def test_request_types_carry_help() -> None:
    for request_type in protocol.REQUEST_TYPES:
        assert request_type.__doc__ and request_type.__doc__.strip(), request_type


def test_cli_help_comes_from_the_request_docstring() -> None:
    from memctl.commands import help_of

    short, description = help_of(protocol.Remember)
    assert short == "store TEXT in project memory (confirmed, or pinned with --pin)"
    assert description.startswith("Store TEXT in project memory")


@pytest.mark.parametrize("request_type", protocol.REQUEST_TYPES, ids=lambda t: t.__name__)
def test_results_round_trip_through_the_reply(request_type: type) -> None:
    """The reply carries the result encoded; the client decodes it as the request's type."""
    result_type = request_type.result_type
    fields = {f.name: _sample(f.type) for f in msgspec.structs.fields(result_type) if f.required}
    result = result_type(**fields)
    reply = protocol.decode_reply(protocol.encode(protocol.ok("x", result)))
    assert isinstance(reply, protocol.Ok)
    decoded = msgspec.msgpack.decode(reply.result, type=result_type)
    assert decoded == result and type(decoded) is result_type


def _sample(kind: object) -> object:
    origin = typing.get_origin(kind)
    if origin is typing.Literal:
        return typing.get_args(kind)[0]
    if origin in (list, tuple, dict):
        return origin()
    if origin is typing.Union or type(kind).__name__ == "UnionType":
        return None if type(None) in typing.get_args(kind) else _sample(typing.get_args(kind)[0])
    if origin is typing.Annotated:
        return _sample(typing.get_args(kind)[0])
    if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        return kind(**{f.name: _sample(f.type) for f in msgspec.structs.fields(kind) if f.required})
    return {int: 1, float: 1.5, str: "s", bool: True}[kind]  # type: ignore[index]


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
        "projects_remove",  # beyond the SPEC list: the CLI contract's `projects [remove DIR]`
        "files_show",
        "files_list",
        "files_refresh",
        "save_memory",
        "ingest_lifecycle",
        "compact",
        "supersede",
        "archive",
        "unarchive",  # beyond the SPEC list: the way back from archive (issue 9)
        "conflicts",  # beyond the SPEC list: conflicts you can list and resolve (issue 9)
        "resolve",
        "review",  # beyond the SPEC list: what memory learned, for a user to see (issue 17)
        "review_accept",
        "review_reject",
        "review_edit",
        "focus",
        "release",
        "connect",
        "graph",  # beyond the SPEC list: reading the edges table (issue 9)
        "note",
        "notes",
        "share",  # beyond the SPEC list: sharing through git (issue 9, seed 001)
        "show",  # beyond the SPEC list: one entry for the memory browser (issue 18)
        "health",  # beyond the SPEC list: the daemon's latency ring (issue 18)
        "session",  # beyond the SPEC list: a session's findings beside their lines (issue 18)
    }
    assert set(tags) == spec_ops
