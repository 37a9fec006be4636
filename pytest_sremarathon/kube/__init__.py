"""The real backend: the marathon on a Kubernetes cluster (kind, or any kubeconfig).

=================  ==========================================================================
``kind``           provisioning a two-zone kind cluster (config, create, wait, delete)
``api``            a small API client from a kubeconfig (TLS, token or client certificate)
``images``         the build step's images: Dockerfile, build context, ``docker build``, ``kind load``
``manifests``      the pipeline's manifests adapted to a real cluster (image tags, pull policy, env)
``cluster``        the real-cluster adapter: the twin cluster's interface over a real one
``scrape``         Prometheus text → the twin's per-service metrics
``traffic``        user traffic as real HTTP requests
``node_faults``    node, zone and network faults on kind's node containers (docker, iptables, tc)
``proxy``          the policy layer: a recording, enforcing reverse proxy for the agent
=================  ==========================================================================

The backend built from these (``KubeBackend``) is :mod:`pytest_sremarathon.backends.kube`.
"""

