"""Capture from agent transcripts (design §6).

``parsers`` turns transcript lines of Claude Code, Codex and Gemini CLI into
``memoryd.core.capture.transcript.Message`` values, one agent per module, pure and incremental.
"""
