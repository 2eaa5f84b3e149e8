"""Storage of project memory: the contract (``base``) and its SQLite implementation."""
