"""kubectl and the Python client against the whole twin: the shop deployed through its pipeline,
controllers and kubelets running in virtual time, every mutation through the policy point."""

from __future__ import annotations

from pathlib import Path

from support.kubectl import Kubectl
from support.twins import AgentSimulation

from pytest_sremarathon.builtin import SCENARIOS_DIR
from pytest_sremarathon.scenario import load_scenario


def test_rollout_undo_restores_the_previous_image_and_the_pods_follow(sim: AgentSimulation, kc: Kubectl) -> None:
    before = {p["spec"]["containers"][0]["image"] for p in sim.pods("ad")}
    kc("set", "image", "deployment/ad", "ad=registry.sremarathon.local/shop/ad:does-not-exist", "-n", "shop")
    sim.run(120)
    assert any(p["status"]["containerStatuses"][0]["state"].get("waiting", {}).get("reason") in
               ("ErrImagePull", "ImagePullBackOff") for p in sim.pods("ad"))
    assert "1" in kc("rollout", "history", "deployment/ad", "-n", "shop")
    kc("rollout", "undo", "deployment/ad", "-n", "shop")
    sim.run(180)
    assert {p["spec"]["containers"][0]["image"] for p in sim.pods("ad")} == before
    assert "successfully rolled out" in kc("rollout", "status", "deployment/ad", "-n", "shop", "--timeout=5s")


def test_deployments_and_replicasets_carry_their_revision(sim: AgentSimulation, kc: Kubectl) -> None:
    """``deployment.kubernetes.io/revision`` on the Deployment too (scripts read it there)."""
    revision = "deployment.kubernetes.io/revision"
    shown = kc("get", "deployments", "-n", "shop", "-o", "jsonpath={range .items[*]}{.metadata.annotations."
               "deployment\\.kubernetes\\.io/revision}{' '}{end}").split()
    assert shown and set(shown) == {"1"}
    kc("set", "image", "deployment/ad", "ad=registry.sremarathon.local/shop/ad:v2", "-n", "shop")
    sim.run(60)
    d = sim.backend.store.get("Deployment", "shop", "ad")
    assert d is not None and d["metadata"]["annotations"][revision] == "2"
    rss = {rs["metadata"]["annotations"][revision] for rs in sim.backend.store.list("ReplicaSet", "shop")
           if rs["metadata"]["labels"].get("app") == "ad"}
    assert rss == {"1", "2"}


def test_set_env_and_edit_roll_out_through_the_controllers(sim: AgentSimulation, kc: Kubectl, tmp_path: Path) -> None:
    kc("set", "env", "deployment/recommendation", "MAX_RECOMMENDATIONS=2", "-n", "shop")
    sim.run(180)
    kubelet = sim.backend.cluster.kubelet
    running = [kubelet.by_name[("shop", p["metadata"]["name"])] for p in sim.pods("recommendation")]
    assert running and all(c.ctx and c.ctx.config_data["MAX_RECOMMENDATIONS"] == "2" for c in running)
    editor = tmp_path / "editor.sh"
    # email is autoscaled (autoscaling.yaml): its HPA owns the replica count, and would set an
    # edited Deployment's replicas back to what it computes, as on a real cluster. Growing it
    # is an edit of the HPA's floor, which the HPA then rolls onto the Deployment.
    editor.write_text("#!/bin/sh\nsed -i 's/^  minReplicas: 2$/  minReplicas: 3/' \"$1\"\n")
    editor.chmod(0o755)
    kc.run("edit", "hpa/email", "-n", "shop", env={"KUBE_EDITOR": str(editor)})
    sim.run(120)
    assert kc.json("-n", "shop", "get", "deployment", "email")["spec"]["replicas"] == 3
    assert len([p for p in sim.pods("email") if p["status"].get("phase") == "Running"]) == 3


def test_logs_by_deployment_show_a_real_traceback(sim: AgentSimulation, kc: Kubectl) -> None:
    # a bad deploy: the shop's curated change that breaks JPY conversions (its unit tests pass)
    scenario = load_scenario(SCENARIOS_DIR / "default.yaml")
    change = next(c for c in scenario.catalogues["shop"] if c.id == "currency-minor-units")
    sim.backend.pipelines.commit_edits("shop", [(e.file, e.find, e.replace) for e in change.edits], change.message,
                                       change.author)
    sim.backend.pipelines.deploy("shop", "HEAD", "orchestrator")
    sim.run(240)
    out = kc("logs", "deploy/currency", "-n", "shop", "--tail", "200")
    assert "Traceback (most recent call last):" in out and 'File "/app/services/currency.py"' in out
    assert "KeyError: 'JPY'" in out


def test_the_dynamic_client_discovers_and_lists_the_twin(sim: AgentSimulation) -> None:
    from kubernetes import config, dynamic

    client = dynamic.DynamicClient(config.new_client_from_config(config_file=str(sim.kubeconfig)))
    deployments = client.resources.get(api_version="apps/v1", kind="Deployment")
    names = {d.metadata.name for d in deployments.get(namespace="shop").items}
    assert {"frontend", "cart", "checkout"} <= names
    nodes = client.resources.get(api_version="v1", kind="Node").get()
    assert {n.metadata.labels["topology.kubernetes.io/zone"] for n in nodes.items} == {"zone-a", "zone-b"}


def test_every_mutation_passes_the_policy_point_and_is_recorded(sim: AgentSimulation, kc: Kubectl) -> None:
    kc("scale", "deployment/ad", "--replicas=3", "-n", "shop")
    denied = kc.run("delete", "namespace", "shop", check=False)
    assert denied.returncode != 0 and "no-delete-namespace" in denied.stderr
    kc("cordon", "worker-a1")
    targets = [(r.verb, r.resource, d.allowed, d.rule) for r, d, _ in sim.admission.records]
    assert ("patch", "deployments", True, None) in targets
    assert ("delete", "namespaces", False, "no-delete-namespace") in targets
    assert ("patch", "nodes", True, None) in targets
    assert sim.backend.store.get("Namespace", None, "shop") is not None
