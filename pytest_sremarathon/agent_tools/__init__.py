"""The run's tool surface for agents (issue 17): one vocabulary, served over MCP.

=================  ==========================================================================
``submissions``    what ``report_finding`` / ``claim_resolved`` submit during a step: its Report
``toolbox``        the tools themselves: each one a request to the run's own endpoints (the
                   Kubernetes API, ``/sremarathon/v1/``, Prometheus, Jaeger) with the agent's
                   token, so the policy point, the recording and the think-time charge apply
                   as to any other request of the agent; ``kubectl`` runs in the agent's sandbox
``rules``          the rules of the game (a resource and a prompt)
``server``         the MCP server: streamable HTTP on loopback behind the agent's token
``config``         the ``mcpServers`` file agents read (``SREMARATHON_MCP_CONFIG``)
``bridge``         ``sremarathon mcp``: stdio for clients that only spawn servers, relayed to it
=================  ==========================================================================

Everything here runs in the marathon's process but holds nothing the agent could not reach
itself: the tools see the cluster only through the agent's credentials.
"""
