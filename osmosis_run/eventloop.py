"""The event loop every osmosis-run command runs on: ``new_event_loop()``.

One factory, so that eval, serve and the gateway's thread all run on the same kind of loop:
asyncio's own, or uvloop's where a caller asks for ``fast`` and uvloop is installed (the extra
``fast``). Only the gateway's thread asks: its loop runs osmosis-run's code alone. A loop that
runs user code stays asyncio's: uvloop's ``close()`` raises ``OSError: [Errno 16] Device or
resource busy`` when that code left a connection open (an HTTP client never closed) that sees
its end while the loop closes, where asyncio's closes anyway (the README's "Event loop").
"""

from __future__ import annotations

import asyncio

__all__ = ["new_event_loop"]


def new_event_loop(*, fast: bool = False) -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's when ``fast`` and uvloop is installed, else asyncio's."""
    if fast:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()
