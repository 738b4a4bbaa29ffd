"""Example workflows and graders: what the README and ``configs/`` run.

- ``osmosis_run.examples.calculator``: ``CalculatorAgent``, an offline, deterministic
  tool-using agent (with documented, deliberate mistakes), its ``CalculatorConfig`` and
  ``config``, and the ``ExactMatchGrader`` and ``PartialCreditGrader`` graders.
  Run: ``osmosis-run eval --config configs/calculator.toml``.
- ``osmosis_run.examples.chat``: ``ChatCompletionsWorkflow``, one call to an
  OpenAI-compatible chat completions endpoint (standard library only), its ``ChatConfig``
  and ``config``. Run: ``osmosis-run eval --config configs/chat.toml`` with a server at the
  configured URL and the key, if it needs one, in ``OSMOSIS_API_KEY``.
"""
