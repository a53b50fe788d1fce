"""Python client of the Sandbox API (docs/api.md): disposable sandboxes to
run code in, their files, output, routes and lifetime, and the admin
endpoints. Standard library only.

    from sandbox_client import Client

    client = Client()  # SANDBOX_URL / SANDBOX_TOKEN, or the CLI's config file
    with client.sandboxes.create(network="none") as sbx:
        print(sbx.exec(["echo", "hello"]).text)
"""

__version__ = "0.1.0"

from ._config import ConfigError  # noqa: E402
from ._tar import UnsafeArchive  # noqa: E402
from .client import Client, EventStream  # noqa: E402
from . import errors  # noqa: E402
from .errors import *  # noqa: E402,F401,F403  (one class per API code; errors.__all__)
from .models import ExecResult, FileEntry, LogLine, OutputChunk, Route  # noqa: E402
from .operation import Operation, OutputStream  # noqa: E402
from .sandbox import ExecStream, Files, LogStream, Sandbox  # noqa: E402

__all__ = [
    "Client",
    "ConfigError",
    "EventStream",
    "ExecResult",
    "ExecStream",
    "FileEntry",
    "Files",
    "LogLine",
    "LogStream",
    "Operation",
    "OutputChunk",
    "OutputStream",
    "Route",
    "Sandbox",
    "UnsafeArchive",
    "__version__",
]
__all__ += errors.__all__
