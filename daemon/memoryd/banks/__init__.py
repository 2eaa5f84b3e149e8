"""Memory banks (SPEC §10): the seven markdown files of a project and what updates them."""
