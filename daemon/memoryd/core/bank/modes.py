"""Which memory bank files each mode reads and may change (design §10). Pure.

======================  ====================================  ======================================
mode                    reads                                 writes
======================  ====================================  ======================================
default (no mode)       every file                            every file
plan (§4.1)             every file                            none: plans are presented first
act (§4.2)              every file                            activeContext, progress, decisionLog
architect (§4.3)        systemPatterns, productContext        systemPatterns, productContext
code (§4.3)             every file                            every file
ask (§4.3)              every file                            none
debug (§4.3)            every file                            activeContext (its findings)
any other mode          every file                            every file
======================  ====================================  ======================================

A mode named in the configuration's ``read_only_modes`` writes nothing, whatever the table says.
A file in ``archive/`` follows the file it was archived from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from memoryd.core.bank import model as bank
from memoryd.core.errors import Forbidden

_ALL: None = None  # every file, those outside the seven too
_DESIGN = ("systemPatterns.md", "productContext.md")
_MODES: dict[str, tuple[tuple[str, ...] | None, tuple[str, ...] | None]] = {
    "default": (_ALL, _ALL),
    "plan": (_ALL, ()),
    "act": (_ALL, (bank.ACTIVE_CONTEXT, bank.PROGRESS, bank.DECISION_LOG)),
    "architect": (_DESIGN, _DESIGN),
    "code": (_ALL, _ALL),
    "ask": (_ALL, ()),
    "debug": (_ALL, (bank.ACTIVE_CONTEXT,)),
}
MODES: tuple[str, ...] = tuple(_MODES)


class Access(msgspec.Struct, frozen=True):
    mode: str
    reads: tuple[str, ...] | None  # None: every file
    writes: tuple[str, ...] | None

    def can_read(self, name: str) -> bool:
        return self.reads is None or _source(name) in self.reads

    def can_write(self, name: str) -> bool:
        return self.writes is None or _source(name) in self.writes

    @property
    def read_only(self) -> bool:
        return self.writes == ()

    def readable(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if self.can_read(n)]

    def writable(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if self.can_write(n)]

    def check_write(self, names: Sequence[str]) -> None:
        """Refuse (Forbidden, naming the files) a change to a file this mode may not write."""
        if self.read_only:
            raise Forbidden(
                f"mode {self.mode!r} is read-only: the memory bank cannot be changed in it"
            )
        refused = [n for n in names if not self.can_write(n)]
        if refused:
            allowed = ", ".join(self.writes or ())
            raise Forbidden(
                f"mode {self.mode!r} cannot change {', '.join(refused)} (it writes {allowed})"
            )


def _source(name: str) -> str:
    return name.split("/", 1)[1] if name.startswith("archive/") else name


def access(mode: str | None, read_only_modes: Iterable[str] = ()) -> Access:
    """The access of ``mode`` (case-insensitive; None is the default mode)."""
    name = (mode or "default").casefold()
    reads, writes = _MODES.get(name, (_ALL, _ALL))
    if name in {m.casefold() for m in read_only_modes}:
        writes = ()
    return Access(name, reads, writes)
