"""The service runtime: an application's handler code served as a real HTTP service.

    python -m pytest_sremarathon.runtime --app shop --service cart

One small program runs every code service of every application (and, with ``--datastore``, the
key-value datastore the apps keep their state in). It loads the service module from the built
artifact with the twin's own :func:`~pytest_sremarathon.runtime.code.load_module` and hands
handlers the twin's :class:`~pytest_sremarathon.runtime.code.Context`, whose router here is
real: ``ctx.call`` is HTTP to the Kubernetes Service name, ``ctx.store`` talks to a datastore
process, ``ctx.work`` burns CPU. See :mod:`.server` for the HTTP surface, :mod:`.router` for
calls and :mod:`.metrics` for ``/metrics``; :mod:`.local` runs a whole application as processes
on loopback (the pipeline's deploy target without Kubernetes).
"""

from .artifacts import ArtifactError, content_digest, read_artifact, short_digest, write_artifact
from .metrics import Registry
from .router import HttpRouter, burn_cpu
from .server import Crash, ServiceServer

__all__ = ["ArtifactError", "Crash", "HttpRouter", "Registry", "ServiceServer", "burn_cpu", "content_digest",
           "read_artifact", "short_digest", "write_artifact"]
