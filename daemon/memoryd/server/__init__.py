"""The request side of the daemon: the socket loop (``loop``) and what each request does
(``handlers``)."""
