"""The event loop every osmosis-run command runs on: ``new_event_loop()``.

One factory, so that eval, serve and the gateway's thread all run on the same kind of loop.
"""

from __future__ import annotations

import asyncio

__all__ = ["new_event_loop"]


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop (asyncio's default policy)."""
    return asyncio.new_event_loop()
