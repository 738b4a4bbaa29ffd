"""A user module whose import raises ImportError (say, an optional extra is missing)."""

raise ImportError("sdkfx_raises_import_error needs the 'frobnicate' extra")
