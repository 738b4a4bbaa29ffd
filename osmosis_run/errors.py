"""The one exception tree of osmosis-run.

A rollout that fails is data (an ``ExecutionResult`` with status ``failure``), never an exception.
What is raised here is everything that stops work before or around rollouts: a wrong
``module:attr`` path, a bad configuration, an unreadable dataset, a run directory that belongs to
another run. Every message says what was wrong, where, and how to fix it, in one line.

    OsmosisRunError
    ├── LoadError                    a "module:attr" path could not give the object asked for
    │   ├── ImportPathError          the string is not of the form "module:attr" (also a ValueError)
    │   ├── ModuleNotFoundLoadError  the module named in the path does not exist
    │   ├── UserModuleImportError    importing the user's module raised (its traceback is __cause__)
    │   ├── AttributeNotFoundError   the module has no such attribute
    │   └── WrongKindError           the object is not of the kind expected (also a TypeError)
    ├── ConfigError                  an option or config file is invalid (usage error, exit 2)
    ├── DatasetError                 the dataset file cannot be read at all (exit 2)
    ├── BackendError                 the backend cannot get ready before any rollout runs: a Ray
    │                                cluster unreachable, actors that cannot start or import the
    │                                workflow, versions that differ between nodes (exit 2)
    ├── RunDirError                  the run directory cannot be used
    │   └── FingerprintMismatchError the run directory holds a run with other inputs
    └── InfrastructureError          the machine failed mid-run (disk full, writer process lost):
                                     what finished is kept and the run resumes (exit 4)

The CLI maps every ``OsmosisRunError`` raised before a run starts to exit code 2 with its
message on one line, and an ``InfrastructureError`` during a run to exit code 4.
"""

from __future__ import annotations

__all__ = [
    "AttributeNotFoundError",
    "BackendError",
    "ConfigError",
    "DatasetError",
    "FingerprintMismatchError",
    "ImportPathError",
    "InfrastructureError",
    "LoadError",
    "ModuleNotFoundLoadError",
    "OsmosisRunError",
    "RunDirError",
    "UserModuleImportError",
    "WrongKindError",
]


class OsmosisRunError(Exception):
    """Base of every error osmosis-run raises on purpose."""


class LoadError(OsmosisRunError, ImportError):
    """A ``module:attr`` path could not be turned into the object asked for."""


class ImportPathError(LoadError, ValueError):
    """The string is not a ``module:attr`` path."""


class ModuleNotFoundLoadError(LoadError):
    """The module named by the path does not exist."""


class UserModuleImportError(LoadError):
    """Importing the user's module raised; the original exception is ``__cause__``."""


class AttributeNotFoundError(LoadError):
    """The module exists but has no such attribute (or it is None)."""


class WrongKindError(LoadError, TypeError):
    """The attribute exists but is not the kind of object expected."""


class ConfigError(OsmosisRunError):
    """An option, environment variable or config file is invalid."""


class DatasetError(OsmosisRunError):
    """The dataset file cannot be opened or read."""


class BackendError(OsmosisRunError):
    """The backend cannot get ready: nothing ran (a Ray cluster, its actors, their versions)."""


class RunDirError(OsmosisRunError):
    """The run directory cannot be used."""


class FingerprintMismatchError(RunDirError):
    """The run directory was made by a run with different inputs."""


class InfrastructureError(OsmosisRunError):
    """The machine failed under a run (a full disk, a lost writer process), not a rollout.

    The message is one line naming the errno and the path, for example ``disk full writing
    runs/x/results.jsonl: No space left on device``. What finished before it is kept.
    """
