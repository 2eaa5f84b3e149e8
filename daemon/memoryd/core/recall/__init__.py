"""Recall, the pure part (SPEC §5): scoring, conflicts, the budget, the payload and its formats,
the SLO monitor."""
