"""Paths as memory keeps them (issue 19): relative to the project root, never the user's home.

A teammate's checkout is elsewhere, and the home folder's name is personal: a path under the
project root is stored relative to it, any other path under a home folder starts with ``~``.
"""

from __future__ import annotations

import re

# Home folders of macOS and Linux, whoever's they are (a transcript may quote another machine's).
_ANY_HOME = re.compile(r"(?<![\w.~])(?:/Users|/home)/[A-Za-z0-9._-]+(?=/|\b)")


class ProjectPaths:
    """Rewrites the paths in a text for one project; ``root`` and ``home`` are absolute."""

    def __init__(self, root: str | None, home: str | None) -> None:
        self._root = root.rstrip("/") if root and root.strip("/") else None
        self._home = home.rstrip("/") if home and home.strip("/") else None
        self._root_rx = (
            re.compile(rf"(?<![\w.-]){re.escape(self._root)}(/|(?![\w.-]))") if self._root else None
        )

    def __call__(self, text: str) -> str:
        if self._root_rx is not None and self._root is not None and self._root in text:
            text = self._root_rx.sub(lambda m: "" if m.group(1) else ".", text)
        if self._home is not None and self._home in text:
            text = text.replace(self._home + "/", "~/").replace(self._home, "~")
        return _ANY_HOME.sub("~", text)
