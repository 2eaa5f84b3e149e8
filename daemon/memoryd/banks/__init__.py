"""Memory banks (design §10): the seven markdown files of a project and what updates them."""
