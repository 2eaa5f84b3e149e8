"""The dispatch table: one handler per request type, gathered from the domain modules.

A handler takes the daemon context and a decoded request and returns the request's result type
(or ``Parked`` to answer later). It raises a ``MemorydError`` subclass for anything the client did
wrong; the loop turns that into an ``Error`` reply. Its help text is the request type's docstring
(``memctl.protocol``).

Adding an operation: the request struct in ``memctl.protocol`` (with its result type and whether
it mutates), its handler in the domain module here (and that module's ``HANDLERS``), its
``memctl`` command in ``memctl.commands``, its test. ``tests/test_dispatch.py`` fails until all
four exist.
"""

from __future__ import annotations

from typing import Any

from memctl import protocol as p
from memoryd.server.context import Handler
from memoryd.server.handlers import admin, bank, hook, instructions, memory, review

DOMAINS = (admin, memory, hook, bank, instructions, review)


def _gather() -> dict[type[p.Request[Any]], Handler]:
    table: dict[type[p.Request[Any]], Handler] = {}
    for domain in DOMAINS:
        for request_type, handler in domain.HANDLERS.items():
            if request_type in table:
                raise RuntimeError(f"{request_type.__name__} has two handlers")
            table[request_type] = handler
    return table


HANDLERS = _gather()
