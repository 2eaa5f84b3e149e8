"""memoryd: the per-user memory daemon for AI coding agents."""

from memctl import __version__

__all__ = ["__version__"]
