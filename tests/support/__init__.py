"""Helpers shared by the tests, importable as ``support.<module>`` from any test.

``tests/`` is on ``sys.path`` through pytest's ``pythonpath`` ini option (pyproject.toml), so
this package and the test agents beside it (``tests/*agents*.py``, named ``module:Class``)
import the same way in the test process, in an agent's worker process (the host hands its
``sys.path`` on to the worker as ``PYTHONPATH``) and in the children started through
``support.cli``. Fixtures shared by many test files are in ``tests/conftest.py``; fixtures of
one directory in its own conftest.

- ``admission``: the recording policy point (the real policy, plus what it recorded).
- ``apps``: the faulty-change kinds an app's catalogue covers; an app's source files.
- ``cli``: ``sremarathon`` run in a child process, with the tests' agents importable.
- ``exec_fixtures``, ``exec_server``: the fake container and the test-only API server the
  exec tests (tests/exec/) run ``kubectl exec`` and the Python clients against.
- ``fresh_venv``: the environment for installing the package into a fresh virtualenv.
- ``http``: one HTTP(S) request to a loopback server with the standard library.
- ``kube``: the twin standing in for a real cluster's API server (the kube tests).
- ``kubectl``: finding the real kubectl (and older client versions) and running it.
- ``prom_helpers``: small builders and queries for the Prometheus tests (tests/prometheus/).
- ``recording``: realistic run records made with the real BundleWriter.
- ``trace_world``: pods and recorded requests for the tracing tests (tests/tracing/).
- ``twins``: applications on a twin without a marathon (a cluster behind its pipelines, or
  the whole twin backend), advanced tick by tick.
"""
