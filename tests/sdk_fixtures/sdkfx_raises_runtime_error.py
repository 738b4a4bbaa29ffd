"""A user module whose top-level code fails with something other than ImportError."""

raise RuntimeError("database URL is not configured")
