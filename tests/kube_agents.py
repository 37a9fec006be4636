"""An agent for the real-backend tests (imported by name in the agent's own process)."""

from __future__ import annotations

from pytest_sremarathon import Report


class ActsThroughThePolicyLayer:
    """Each step: reads pods, annotates a deployment (allowed), tries to delete the app's
    namespace (denied) and lists the pipeline's changes — all through the agent's kubeconfig
    and pipeline handle. At its first step it also restarts ``cart`` (a pod template change)."""

    def setup(self, env) -> None:
        from kubernetes import client, config

        self.api = config.new_client_from_config(config_file=str(env.kubeconfig))
        self.core, self.apps = client.CoreV1Api(self.api), client.AppsV1Api(self.api)

    def step(self, obs) -> Report:
        from kubernetes.client.exceptions import ApiException

        pods = self.core.list_namespaced_pod("shop").items
        if obs.step == 1:
            self.apps.patch_namespaced_deployment("cart", "shop", {"spec": {"template": {"metadata": {
                "annotations": {"kubectl.kubernetes.io/restartedAt": obs.time.isoformat()}}}}})
        self.apps.patch_namespaced_deployment("email", "shop",
                                              {"metadata": {"annotations": {"agent-step": str(obs.step)}}})
        try:
            self.core.delete_namespace("shop")
            denied = "not denied"
        except ApiException as exc:
            denied = f"{exc.status}"
        changes = obs.pipeline.changes("shop")
        return Report(notes=f"pods={len(pods)} delete-namespace={denied} changes={len(changes)}")
