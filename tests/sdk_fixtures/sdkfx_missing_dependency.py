"""A user module that imports a dependency which is not installed."""

import importlib

importlib.import_module("sdkfx_dependency_that_is_not_installed")
