"""The model gateway: every model call of a run seen, counted, paced, recorded and replayable.

When ``eval`` has a model endpoint, it starts a loopback OpenAI-compatible gateway
(``host.Gateway``, on a thread of its own) and gives each rollout
``chat_completions_url = http://127.0.0.1:<port>/v1/rollouts/<rollout id>`` and a random
per-run key; only the gateway holds the provider key and talks to the upstream.

    proxy.py       routes, auth, forwarding and SSE relay, retries, usage, records
    pacing.py      the adaptive in-flight limit, rpm/tpm budgets, back-off and Retry-After
    cache.py       the SQLite response cache and its keys
    recording.py   rollouts/<id>/model_calls.jsonl
    accounting.py  per-rollout usage and the live figures
    preflight.py   the one request before any rollout
    host.py        the thread it runs on, and its API for the engine
    setup.py       the gateway a run's settings ask for

Upstream calls go through the one client, ``osmosis_run.http.client`` (httptools), imported
only when a gateway starts: ``import osmosis_run`` and ``--help`` never load this package.
"""
