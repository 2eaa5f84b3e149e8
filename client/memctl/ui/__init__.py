"""The memory browser (``memctl ui``, issue 18): a local web page over the daemon's socket.

A thin client like every other: each view is one or more typed requests (``memctl.protocol``)
sent through ``memctl.transport``; it never opens the store. Starlette and uvicorn come with the
optional extra ``memoryd[ui]`` and are imported only by ``memctl ui``.
"""
