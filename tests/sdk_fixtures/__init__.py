"""Small importable modules for the ``module:attr`` loader tests.

The loader tests put this folder on ``sys.path``, so each module here is a top-level module
named ``sdkfx_*`` (a prefix no real package uses), exactly as a user's rollout module would be.
"""
