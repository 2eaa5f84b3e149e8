"""Recall, the pure part (design §5): scoring, conflicts, the budget, the payload and its formats,
the SLO monitor."""
