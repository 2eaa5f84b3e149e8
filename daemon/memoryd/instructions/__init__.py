"""Instruction files (design §11): hierarchical ``MEMORY.md`` files found on disk,
``@import`` resolved under the trust and size limits, provenance per segment, and ``save_memory``
with a diff preview. The pure rules live in ``memoryd.core.instructions``; ``loader`` does the
file system work."""
