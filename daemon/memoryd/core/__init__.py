"""The pure core: data in, results or plans out.

Nothing here does I/O or imports zmq, watchdog, apscheduler, sqlite3 or structlog; a test walks
the imports to keep it so. Time comes in as an argument (``now``), never from the clock.
"""
