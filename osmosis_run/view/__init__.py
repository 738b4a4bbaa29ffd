"""``osmosis-run view``: a local web app over run directories, live while an eval writes them.

    runs.py     which run directories a PATH holds, and each one's state (running or not)
    index.py    one run as the view serves it: its rollouts' table rows, sort keys and
                summary, kept up to date by following results.jsonl by offset
    search.py   full-text search over a run's results lines, streaming hits as found
    app.py      the Starlette app: the page, its JSON API, files, and the token check

The page (``osmosis_run/reports/html/``) is the HTML report's own code: the same charts, rows,
transcript and drawer, fed by this API instead of data embedded in the file.
"""
