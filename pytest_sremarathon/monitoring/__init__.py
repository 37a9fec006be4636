"""What the ``monitoring`` namespace holds, whichever backend runs: the series every cluster
records into its :class:`~pytest_sremarathon.prometheus.TSDB` (names, types and help as
production exporters publish them, :mod:`.catalog`), the kube-state-metrics and cAdvisor
series computed from a cluster's objects and containers (:mod:`.kube_state`), the scrape
targets (:mod:`.targets`) and the ``monitoring`` Services (:mod:`.services`).

The request series of the twin are drawn from its handler samples (``twin/counts.py``); the
kube backend records what it scrapes from the service processes (``kube/scrape.py``). Both
go through the same names and label sets, so an agent's PromQL reads the same on both.
"""
