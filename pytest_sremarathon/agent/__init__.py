"""What runs in the agent's process, or is imported by the agent's code: the public types
(:mod:`.protocol`), the worker the host starts (:mod:`.worker`), the clients behind
``Pipeline`` and ``Telemetry`` (:mod:`.clients`) and the agent loader (:mod:`.loader`).

The marathon's side of the agent process (spawning, isolation, budgets) is
:mod:`pytest_sremarathon.agent_host`; import-linter checks that nothing here imports the rest
of the package."""
