"""The view's Starlette app: the page, the JSON API under ``/api``, the runs' files, the token.

Pages (one HTML document; its script draws whichever the path names, and the query string
holds the filters, sort and search, so that a URL copied shows the same thing):

    /                              the runs list
    /runs/<name>?status=..&q=..    a run: summary, charts, the rollouts table (#rollout=<id>)
    /compare?a=<name>&b=<name>     two runs paired by rollout id (a is the baseline)

API (JSON; every handler runs in a worker thread, so the event loop only moves bytes):

    GET /api/runs                              the runs list
    GET /api/runs/<name>                       summary, charts, facts; ``version`` changes when
                                               rollouts were added (the page polls it)
    GET /api/runs/<name>/rollouts?..           one page of the table: ``offset``, ``limit``,
                                               ``sort``, ``desc`` and the filters of ``Query``
    GET /api/runs/<name>/rollouts/<id>         one rollout, as the report's drawer shows it
    GET /api/runs/<name>/position?id=..&..     where a rollout is in a filtered table
    GET /api/runs/<name>/search?q=..           NDJSON hits, streamed as they are found
    GET /api/compare?a=..&b=..                 the report's comparison page's data
    GET /runs/<name>/files/<path>              a file of the run (rollouts/<id>/...)

Safety: with a token (``--token``, required off loopback) every request must carry it, as
``Authorization: Bearer``, the cookie the page sets, or ``?token=`` (which sets the cookie);
compared in constant time, else 401. Only files inside a viewed run directory are served: a
path that leaves it (``..``, an absolute path, a symlink pointing out) is 404, as is a run or a
rollout the view does not know. Files are served as text, as images (never SVG, which can hold
script) or as downloads, with ``nosniff`` and a sandboxing Content Security Policy; the page
itself allows only its own scripts and no request off the view.
"""

from __future__ import annotations

import hmac
import html
import json
import math
import mimetypes
import threading
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from osmosis_run import __version__
from osmosis_run.reports.html_report import compare_payload, limits, usage_totals
from osmosis_run.results.records import STATUSES, Summary
from osmosis_run.view.index import SORTS, Query, RunIndex
from osmosis_run.view.runs import Runs, is_locked
from osmosis_run.view.search import search

__all__ = ["TOKEN_COOKIE", "View", "create_view_app"]

TOKEN_COOKIE = "osmosis_view_token"
PAGE_LIMIT = 500
FIND_EVERY_S = 0.5
_PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' "
    "data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_FILE_CSP = "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'"
_ASSETS = ("report.js", "report.css", "view.js", "view.css")
_IMAGES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif"}
_IMAGES[".webp"] = "image/webp"
_TEXT_PEEK = 4096


class NotFound(Exception):
    """What the request names does not exist here (answered 404)."""


class View:
    """The runs the view serves, each indexed once and followed as it grows."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs
        self._indexes: dict[str, RunIndex] = {}
        self._lock = threading.Lock()
        self._found: tuple[float, dict[str, Path]] = (-math.inf, {})

    def find(self) -> dict[str, Path]:
        """The run directories by name, as they are now (looked for at most every half second:
        the page asks several things at once, and a folder may hold many runs)."""
        now = time.monotonic()
        with self._lock:
            if now - self._found[0] >= FIND_EVERY_S:
                self._found = (now, self.runs.find())
            return self._found[1]

    def index(self, name: str) -> RunIndex:
        """The index of the run called ``name``, brought up to date.

        Raises:
            NotFound: no run of that name.
        """
        found = self.find()
        if name not in found:
            raise NotFound(f"no run {name!r} here")
        with self._lock:
            index = self._indexes.get(name)
            if index is None or index.run_dir != found[name]:
                index = self._indexes[name] = RunIndex(found[name], name)
        index.refresh()
        return index

    def overviews(self) -> list[dict[str, Any]]:
        """Every run as the runs list shows it (a finished run from its summary.json alone)."""
        out = []
        for name, run_dir in self.find().items():
            known = self._indexes.get(name)
            quick = None if known is not None else _finished_overview(name, run_dir)
            if quick is None:
                index = self.index(name)
                with index.lock:
                    quick = index.overview()
            out.append(quick)
        return out

    def warm(self) -> None:
        """Index every run now (a worker thread calls it at start: the first page is quick)."""
        for name in self.find():
            try:
                self.index(name)
            except (NotFound, OSError):
                continue


def create_view_app(view: View, *, token: str | None = None) -> Starlette:
    """The ASGI app of ``osmosis-run view`` over ``view``'s runs."""
    api = _Api(view)
    routes = [
        Route("/", api.page),
        Route("/runs/{name}", api.page),
        Route("/compare", api.page),
        Route("/static/{asset}", api.asset),
        Route("/api/runs", api.runs),
        Route("/api/runs/{name}", api.run),
        Route("/api/runs/{name}/rollouts", api.rollouts),
        Route("/api/runs/{name}/rollouts/{rollout:path}", api.rollout),
        Route("/api/runs/{name}/position", api.position),
        Route("/api/runs/{name}/search", api.search),
        Route("/api/compare", api.compare),
        Route("/runs/{name}/files/{path:path}", api.file),
    ]
    app = Starlette(routes=routes, exception_handlers={NotFound: _not_found, 404: _not_found})
    return _Guard(app, token) if token else _Headers(app)  # type: ignore[return-value]


class _Api:
    """The routes' handlers (plain functions: Starlette runs them in worker threads)."""

    def __init__(self, view: View) -> None:
        self.view = view

    def page(self, _request: Request) -> Response:
        return _page()

    def asset(self, request: Request) -> Response:
        name = request.path_params["asset"]
        if name not in _ASSETS:
            raise NotFound(name)
        kind = "text/javascript" if name.endswith(".js") else "text/css"
        return Response(_asset(name), media_type=f"{kind}; charset=utf-8")

    def runs(self, _request: Request) -> Response:
        return _json({"runs": self.view.overviews(), "version": __version__})

    def run(self, request: Request) -> Response:
        index = self.view.index(request.path_params["name"])
        with index.lock:
            summary = index.summary()
            body = {
                "run": _run_info(index),
                "overview": index.overview(),
                "summary": summary.model_dump(mode="json"),
                "usage": usage_totals(summary),
                "charts": index.charts(),
                "metrics": index.metric_means.means(),
                "metadata_keys": index.metadata_keys(),
                "version": index.version,
            }
        return _json(body)

    def rollouts(self, request: Request) -> Response:
        index = self.view.index(request.path_params["name"])
        query = _query(request)
        offset = _int(request.query_params.get("offset"), 0, low=0)
        limit = _int(request.query_params.get("limit"), 100, low=1, high=PAGE_LIMIT)
        with index.lock:
            total, rows = index.page(query, offset=offset, limit=limit)
            version = index.version
        head = f'{{"total":{total},"offset":{offset},"version":{version},"rows":'.encode()
        return Response(head + rows + b"}", media_type="application/json")

    def position(self, request: Request) -> Response:
        index = self.view.index(request.path_params["name"])
        rollout_id = request.query_params.get("id", "")
        with index.lock:
            at = index.position(_query(request), rollout_id)
        return _json({"id": rollout_id, "position": at})

    def rollout(self, request: Request) -> Response:
        index = self.view.index(request.path_params["name"])
        rollout_id = request.path_params["rollout"]
        with index.lock:
            row = index.detail(rollout_id)
        if row is None:
            raise NotFound(f"no rollout {rollout_id!r} in {index.name}")
        return _json(row)

    def search(self, request: Request) -> Response:
        index = self.view.index(request.path_params["name"])
        words = request.query_params.get("q", "")
        return StreamingResponse(
            _iterate(search(index, words)),
            media_type="application/x-ndjson",
            headers={"cache-control": "no-store"},
        )

    def compare(self, request: Request) -> Response:
        from osmosis_run.results.compare import compare_runs
        from osmosis_run.store.rundata import load_run

        found = self.view.find()
        names = [request.query_params.get(side, "") for side in ("a", "b")]
        for name in names:
            if name not in found:
                raise NotFound(f"no run {name!r} here")
        a, b = (load_run(found[name]) for name in names)
        bases = (_base(names[0]), _base(names[1]))
        payload = compare_payload(a, b, comparison=compare_runs(a, b), bases=bases)
        payload["names"] = names
        return _json(payload)

    def file(self, request: Request) -> Response:
        found = self.view.find()
        name = request.path_params["name"]
        if name not in found:
            raise NotFound(f"no run {name!r} here")
        return _file(found[name], request.path_params["path"])


# -- responses --------------------------------------------------------------------------------


def _json(value: Any) -> Response:
    body = orjson.dumps(value, default=_plain)
    return Response(body, media_type="application/json", headers={"cache-control": "no-store"})


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


async def _not_found(request: Request, exc: Exception) -> Response:
    message = str(exc) if isinstance(exc, NotFound) else "not found"
    if request.url.path.startswith("/api/"):
        return Response(orjson.dumps({"error": message}), 404, media_type="application/json")
    return PlainTextResponse(f"404: {message}\n", 404)


def _iterate(lines: Iterator[bytes]) -> Iterator[bytes]:
    yield from lines


def _page() -> Response:
    data = {
        "kind": "view",
        "statuses": list(STATUSES),
        "version": __version__,
        "limits": limits(),
        "sorts": list(SORTS),
    }
    text = _asset("view.html").replace("{{version}}", html.escape(__version__))
    text = text.replace("{{data}}", _script_json(data))
    return Response(text, media_type="text/html; charset=utf-8")


def _script_json(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


_ASSET_CACHE: dict[str, str] = {}


def _asset(name: str) -> str:
    text = _ASSET_CACHE.get(name)
    if text is None:
        folder = "view" if name.startswith("view") else "reports"
        package = resources.files(f"osmosis_run.{folder}")
        path = package / "html" / name if folder == "reports" else package / "static" / name
        text = _ASSET_CACHE[name] = path.read_text(encoding="utf-8")
    return text


def _base(name: str) -> str:
    """Where a run's files are, for the page's links (``fileHref`` adds rollouts/<id>/...)."""
    from urllib.parse import quote

    return f"/runs/{quote(name, safe='')}/files/"


def _run_info(index: RunIndex) -> dict[str, Any]:
    config = index.config
    fields = ("dataset", "workflow", "grader", "samples", "no_messages")
    return {
        "name": index.name,
        "base": _base(index.name),
        **{key: config[key] for key in fields if key in config},
        "pass_threshold": index.threshold,
        "path": str(index.run_dir),
    }


def _finished_overview(name: str, run_dir: Path) -> dict[str, Any] | None:
    """A run's line of the runs list from its summary.json, when that is its last word.

    None when the run is being written, or its results changed after its summary.
    """
    from osmosis_run.errors import RunDirError
    from osmosis_run.store.layout import RESULTS, SUMMARY
    from osmosis_run.store.rundata import read_run_config
    from osmosis_run.view.index import started_at

    try:
        written = (run_dir / SUMMARY).stat().st_mtime_ns
        results = (run_dir / RESULTS).stat().st_mtime_ns
        summary = Summary.model_validate_json((run_dir / SUMMARY).read_bytes())
    except (OSError, ValueError):
        return None
    if results > written or is_locked(run_dir):
        return None
    try:
        config = read_run_config(run_dir)
    except RunDirError:
        config = {}  # listed without it; `osmosis-run report` says what is wrong
    return {
        "name": name,
        "path": str(run_dir),
        "dataset": config.get("dataset"),
        "workflow": config.get("workflow"),
        "grader": config.get("grader"),
        "state": "finished" if summary.complete else "interrupted",
        "rollouts": summary.rollouts,
        "planned": summary.planned,
        "mean_reward": summary.reward_all.mean,
        "pass_rate": summary.pass_rate,
        "errors": summary.errors,
        "started_at": started_at(run_dir),
        "wall_s": summary.wall_s,
        "version": 0,
    }


def _query(request: Request) -> Query:
    p = request.query_params
    sort = p.get("sort", "row")
    return Query(
        status=p.get("status", ""),
        category=p.get("category", ""),
        outcome=p.get("outcome", ""),
        reward_min=_float(p.get("rmin")),
        reward_max=_float(p.get("rmax")),
        sample=_int(p.get("sample"), None, low=0),
        meta_key=p.get("meta", "").partition("=")[0],
        meta_value=p.get("meta", "").partition("=")[2],
        sort=sort if sort in SORTS else "row",
        descending=p.get("desc", "") in ("1", "true"),
    )


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def _int(text: str | None, default: Any, *, low: int, high: int | None = None) -> Any:
    try:
        value = int(text) if text not in (None, "") else default
    except ValueError:
        return default
    if value is None:
        return None
    value = max(low, value)
    return min(high, value) if high is not None else value


# -- files ------------------------------------------------------------------------------------


def _file(run_dir: Path, relative: str) -> Response:
    """A file inside ``run_dir``, or 404 for anything that leads elsewhere or is not a file."""
    root = run_dir.resolve()
    if not relative or relative.startswith(("/", "\\")) or "\0" in relative:
        raise NotFound(relative)
    target = (root / relative).resolve()
    if not target.is_relative_to(root) or not target.is_file():
        raise NotFound(relative)
    headers = {
        "x-content-type-options": "nosniff",
        "content-security-policy": _FILE_CSP,
        "cache-control": "no-store",
    }
    image = _IMAGES.get(target.suffix.lower())
    if image is not None:
        return Response(target.read_bytes(), media_type=image, headers=headers)
    with target.open("rb") as f:
        peek = f.read(_TEXT_PEEK)
    if _is_text(peek, target):
        return Response(
            target.read_bytes(), media_type="text/plain; charset=utf-8", headers=headers
        )
    headers["content-disposition"] = f'attachment; filename="{_ascii_name(target.name)}"'
    return Response(target.read_bytes(), media_type="application/octet-stream", headers=headers)


def _is_text(peek: bytes, path: Path) -> bool:
    guessed, _ = mimetypes.guess_type(path.name)
    textual = ("text/", "application/json", "application/x-ndjson", "application/xml", "image/svg")
    if guessed is not None and not guessed.startswith(textual) and guessed != "application/x-sh":
        return False
    if b"\0" in peek:
        return False
    try:
        peek.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(peek) - 3  # a character cut by the peek's end
    return True


def _ascii_name(name: str) -> str:
    return "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in name)


# -- the token, and headers on every answer ---------------------------------------------------


class _Headers:
    """Headers every answer carries: no sniffing, no framing, no referrer."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                for name, value in _ALWAYS:
                    if name not in names:
                        headers.append((name, value))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, sending)


_ALWAYS = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"content-security-policy", _PAGE_CSP.encode()),
)


class _Guard(_Headers):
    """Every request must carry the token: a Bearer header, the cookie, or ``?token=``."""

    def __init__(self, app: Any, token: str) -> None:
        super().__init__(app)
        self.token = token.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        given = request.query_params.get("token")
        if given is not None and self._matches(given):
            cookie = (f"{TOKEN_COOKIE}={given}; Path=/; HttpOnly; SameSite=Strict").encode()
            await super().__call__(scope, receive, _with_cookie(send, cookie))
            return
        bearer = request.headers.get("authorization", "")
        offered = bearer[7:] if bearer[:7].lower() == "bearer " else None
        offered = offered if offered is not None else request.cookies.get(TOKEN_COOKIE)
        if offered is not None and self._matches(offered):
            await super().__call__(scope, receive, send)
            return
        body = (
            "401: this view needs its token; open the URL osmosis-run view printed "
            "(it carries ?token=...), or send Authorization: Bearer TOKEN\n"
        )
        response = PlainTextResponse(body, 401, headers={"www-authenticate": "Bearer"})
        await response(scope, receive, send)

    def _matches(self, offered: str) -> bool:
        return hmac.compare_digest(offered.encode(), self.token)


def _with_cookie(send: Any, cookie: bytes) -> Any:
    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start":
            headers = [*message.get("headers", []), (b"set-cookie", cookie)]
            message = {**message, "headers": headers}
        await send(message)

    return sending
