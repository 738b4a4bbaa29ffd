"""Where the documentation site is, and each command's page in it (every --help ends there).

``DOCS_URL`` is the ``Documentation`` URL of pyproject.toml's ``[project.urls]`` (a test keeps
the two equal); a page is a path under it, as mkdocs builds ``docs/<page>.md`` (or
``docs/<page>index.md``) with directory URLs.
"""

from __future__ import annotations

DOCS_URL = "https://osmosis-run.readthedocs.io/en/latest/"

APP_PAGE = "reference/cli/"
COMMANDS = ("eval", "validate", "report", "compare", "init", "grade", "show", "serve", "view")
# The app's page (None) and each command's, relative to DOCS_URL.
PAGES: dict[str | None, str] = {
    None: APP_PAGE,
    **{command: f"{APP_PAGE}{command}/" for command in COMMANDS},
}
CONFIGURATION_PAGE = "reference/configuration/"


def page_url(page: str) -> str:
    """The full URL of a page of the site (``reference/cli/eval/``)."""
    return DOCS_URL + page


def docs_line(command: str | None) -> str:
    """``Docs: URL`` of a command's page (``None``: the app's)."""
    return f"Docs: {page_url(PAGES[command])}"


def with_docs_line(epilog: str, command: str | None) -> str:
    """A help epilog, then the page's link alone on the last line.

    The link is a paragraph of its own marked ``\\b`` (click's "do not rewrap"), so that a
    narrow terminal never breaks the URL (click would break it at "osmosis-" otherwise).
    """
    return f"{epilog}\n\n\b\n{docs_line(command)}"
