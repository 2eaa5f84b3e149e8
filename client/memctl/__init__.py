"""memctl: the thin client of memoryd (command line, agent hooks, MCP).

Its import set stays small (pyzmq, msgspec, stdlib) so that a hook starts fast.
"""

__version__ = "0.1.0"
