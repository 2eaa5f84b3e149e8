"""memctl: the thin client of memoryd (command line, agent hooks, MCP).

Its import set stays small (msgspec and the standard library; pyzmq only as the fallback of its
wire client) so that a command, and above all a hook, starts fast.
"""

__version__ = "0.1.0"
