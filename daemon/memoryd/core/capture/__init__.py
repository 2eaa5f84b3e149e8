"""Capture, the pure part (design §6-§7): transcript messages, extraction rules, findings, tool
outcomes, episodes and promotion."""
