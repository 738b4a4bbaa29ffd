"""The listening socket and the uvicorn server that ``serve`` and ``view`` run, made one way.

The socket is bound before anything is served, so a taken port is a one-line usage error; the
server is uvicorn speaking osmosis-run's own HTTP/1.1 protocol (``http/listener.py``), without
uvicorn's signal handling: the command's own (``cli/process.py``) stops it.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import uvicorn

__all__ = ["ListenError", "listen", "url_of", "uvicorn_server"]


class ListenError(Exception):
    """The address cannot be listened on (its message is the one line to print)."""


def url_of(host: str, port: int) -> str:
    """``http://host:port``, with an IPv6 address in brackets."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def listen(host: str, port: int, *, option: str = "--port") -> socket.socket:
    """The listening socket on ``host:port`` (0: a free port).

    Made with ``IPPROTO_TCP`` named: asyncio turns Nagle's algorithm off only on sockets that
    say so, and a long-poll answered in two writes would otherwise wait for a delayed ACK.

    Raises:
        ListenError: the address is taken, or not this machine's.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        listener.bind((host, port))
        listener.listen(2048)
    except OSError as exc:
        listener.close()
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            reason = f"the address is already in use; stop what listens there or choose {option}"
        raise ListenError(f"cannot listen on {url_of(host, port)}: {reason}") from None
    listener.set_inheritable(False)
    return listener


def uvicorn_server(app: Any, *, keep_alive: int) -> uvicorn.Server:
    """uvicorn on osmosis-run's HTTP/1.1 protocol, without its own signal handling."""
    import uvicorn

    from osmosis_run.http.listener import UvicornProtocol

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        def install_signal_handlers(self) -> None:
            pass

    config = uvicorn.Config(
        app,
        # Lighter than h11 in Python, one write per response; it also holds the request timeout,
        # the body limit and the connection limit (its Limits' defaults, in the README).
        http=UvicornProtocol,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=keep_alive,
        lifespan="on",
    )
    return Server(config)
