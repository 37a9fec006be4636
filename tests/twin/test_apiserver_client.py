"""The twin API server through the official ``kubernetes`` Python client (and raw HTTP where the
client hides the wire format: Tables, watch framing, Status bodies)."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.rest import ApiException

NS = "shop"
POD_A, POD_B = "web-7d4b9c8f6d-abcde", "web-7d4b9c8f6d-fghij"


def status_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


def expect_error(code: int, reason: str):
    class _Ctx:
        def __enter__(self):
            return self

        def __exit__(self, et, ev, tb):
            assert et is not None and issubclass(et, ApiException), f"expected ApiException {code}, got {et}"
            self.status = status_of(ev)
            assert ev.status == code, self.status
            assert self.status["kind"] == "Status" and self.status["status"] == "Failure"
            assert self.status["reason"] == reason and self.status["code"] == code
            return True

    return _Ctx()


# -- authentication, discovery, version -------------------------------------------------------

def test_requests_without_a_valid_token_get_401(twin, http):
    for token in (None, "wrong-token"):
        r = http("GET", "/api/v1/namespaces/shop/pods", token=token)
        assert r.status == 401
        assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
    assert http("GET", "/api/v1/namespaces/shop/pods", token=twin.agent_token, tls=True).status == 200
    assert http("GET", "/healthz", token=None).body == b"ok"


def test_version_and_discovery(client, http):
    assert k8s.VersionApi(client).get_code().major == "1"
    core = k8s.CoreV1Api(client).get_api_resources()
    by_name = {r.name: r for r in core.resources}
    assert {"pods", "nodes", "namespaces", "services", "endpoints", "configmaps", "secrets", "events"} <= set(by_name)
    assert by_name["pods"].short_names == ["po"] and "all" in by_name["pods"].categories
    ev = by_name["pods/eviction"]
    assert (ev.group, ev.version, ev.kind) == ("policy", "v1", "Eviction")
    assert "pods/log" in by_name and "pods/status" in by_name
    apps = {r.name: r for r in k8s.AppsV1Api(client).get_api_resources().resources}
    scale = apps["deployments/scale"]
    assert (scale.group, scale.version, scale.kind) == ("autoscaling", "v1", "Scale")
    groups = {g.name: g for g in k8s.ApisApi(client).get_api_versions().groups}
    assert groups["apps"].preferred_version.group_version == "apps/v1"
    assert "metrics.k8s.io" in groups
    assert http("GET", "/api").json()["versions"] == ["v1"]
    assert http("GET", "/apis/nope/v1/things").status == 404
    r = http("GET", "/api/v1/namespaces/shop/widgets")
    assert r.status == 404 and r.json()["reason"] == "NotFound"


def test_openapi_v3_patch_operations_carry_gvk_and_field_validation(http):
    index = http("GET", "/openapi/v3").json()["paths"]
    assert {"api/v1", "apis/apps/v1"} <= set(index)
    doc = http("GET", index["apis/apps/v1"]["serverRelativeURL"]).json()
    op = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
    assert op["x-kubernetes-group-version-kind"] == {"group": "apps", "version": "v1", "kind": "Deployment"}
    assert any(p["name"] == "fieldValidation" and p["in"] == "query" for p in op["parameters"])
    schemas = doc["components"]["schemas"]
    assert schemas["io.k8s.api.apps.v1.Deployment"]["x-kubernetes-group-version-kind"] == [
        {"group": "apps", "version": "v1", "kind": "Deployment"}]


# -- reads ------------------------------------------------------------------------------------

def test_get_and_list_parse_into_client_models(client):
    v1, apps = k8s.CoreV1Api(client), k8s.AppsV1Api(client)
    pod = v1.read_namespaced_pod(POD_B, NS)
    assert pod.status.container_statuses[0].last_state.terminated.reason == "OOMKilled"
    assert pod.spec.containers[0].image_pull_policy == "IfNotPresent"
    assert pod.spec.restart_policy == "Always" and pod.spec.dns_policy == "ClusterFirst"
    dep = apps.read_namespaced_deployment("web", NS)
    assert dep.spec.strategy.rolling_update.max_surge == "25%"
    assert [n.metadata.name for n in v1.list_node().items] == ["node-a1", "node-b1"]
    assert len(v1.list_pod_for_all_namespaces().items) == 2
    assert {e.reason for e in v1.list_namespaced_event(NS).items} == {"Pulled", "BackOff"}
    assert v1.read_namespaced_endpoints("web", NS).subsets[0].addresses[0].ip == "10.244.2.11"
    assert v1.read_namespaced_config_map("web-config", NS).data["LOG_LEVEL"] == "info"
    with expect_error(404, "NotFound") as e:
        v1.read_namespaced_pod("nope", NS)
    assert e.status["message"] == 'pods "nope" not found'
    assert e.status["details"] == {"name": "nope", "kind": "pods"}
    with expect_error(404, "NotFound") as e:
        apps.read_namespaced_deployment("nope", NS)
    assert e.status["message"] == 'deployments.apps "nope" not found'


@pytest.mark.parametrize("selector, expected", [
    ("app=web", {POD_A, POD_B}),
    ("app==web,tier!=db", {POD_A, POD_B}),
    ("app in (web, api)", {POD_A, POD_B}),
    ("app notin (web)", set()),
    ("pod-template-hash", {POD_A, POD_B}),
    ("!pod-template-hash", set()),
    ("app=web,!missing", {POD_A, POD_B}),
])
def test_label_selectors(client, selector, expected):
    pods = k8s.CoreV1Api(client).list_namespaced_pod(NS, label_selector=selector).items
    assert {p.metadata.name for p in pods} == expected


@pytest.mark.parametrize("selector, expected", [
    ("spec.nodeName=node-a1", {POD_A}),
    ("spec.nodeName=node-b1,status.phase!=Succeeded,status.phase!=Failed", {POD_B}),
    ("metadata.name=" + POD_B, {POD_B}),
    ("metadata.namespace=shop,status.phase=Running", {POD_A, POD_B}),
    ("status.phase!=Running", set()),
])
def test_field_selectors_cluster_wide(client, selector, expected):
    pods = k8s.CoreV1Api(client).list_pod_for_all_namespaces(field_selector=selector).items
    assert {p.metadata.name for p in pods} == expected


def test_event_field_selectors_and_bad_selectors(twin, client):
    v1 = k8s.CoreV1Api(client)
    uid = twin.objs["pod1"]["metadata"]["uid"]
    sel = f"involvedObject.name={POD_B},involvedObject.namespace={NS},involvedObject.uid={uid}"
    events = v1.list_namespaced_event(NS, field_selector=sel).items
    assert len(events) == 2 and events[0].involved_object.kind == "Pod"
    assert v1.list_event_for_all_namespaces(field_selector="involvedObject.name=other").items == []
    with expect_error(400, "BadRequest") as e:
        v1.list_namespaced_pod(NS, field_selector="spec.bogus=1")
    assert "field label not supported" in e.status["message"]


def test_list_pagination_with_limit_and_continue(http):
    first = http("GET", "/api/v1/namespaces/shop/events?limit=1").json()
    assert len(first["items"]) == 1 and first["metadata"]["continue"]
    second = http("GET", f"/api/v1/namespaces/shop/events?limit=1&continue={first['metadata']['continue']}").json()
    assert len(second["items"]) == 1 and "continue" not in second["metadata"]
    assert first["items"][0]["metadata"]["name"] != second["items"][0]["metadata"]["name"]
    assert first["kind"] == "EventList" and first["apiVersion"] == "v1"


def test_table_output_uses_virtual_time(twin, http):
    accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
    table = http("GET", "/api/v1/namespaces/shop/pods", headers=accept).json()
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    cols = [(c["name"], c["priority"]) for c in table["columnDefinitions"]]
    assert cols[:5] == [("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0)]
    assert ("IP", 1) in cols and ("Node", 1) in cols
    row = {r["cells"][0]: r for r in table["rows"]}[POD_B]
    assert row["cells"][1:5] == ["1/1", "Running", "3 (5m ago)", "5m"]
    assert row["object"]["kind"] == "PartialObjectMetadata" and row["object"]["metadata"]["namespace"] == NS
    twin.clock.advance(3 * 3600)
    table = http("GET", "/apis/apps/v1/namespaces/shop/deployments", headers=accept).json()
    assert table["rows"][0]["cells"][:5] == ["web", "2/2", 2, 2, "3h15m"]
    nodes = http("GET", "/api/v1/nodes", headers=accept).json()
    assert [r["cells"][1] for r in nodes["rows"]] == ["Ready", "Ready"]


# -- writes -----------------------------------------------------------------------------------

def _deployment(name: str, replicas: int = 2, **spec_extra) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "main", "image": f"registry.local/{name}:1"},
                                                          {"name": "sidecar", "image": "registry.local/proxy"}]}},
                     **spec_extra}}


def test_create_defaults_like_the_real_server(client):
    apps, v1 = k8s.AppsV1Api(client), k8s.CoreV1Api(client)
    dep = apps.create_namespaced_deployment(NS, _deployment("api"))
    assert dep.metadata.uid and dep.metadata.resource_version and dep.metadata.generation == 1
    assert dep.spec.strategy.type == "RollingUpdate"
    assert (dep.spec.strategy.rolling_update.max_unavailable, dep.spec.strategy.rolling_update.max_surge) == \
        ("25%", "25%")
    assert dep.spec.revision_history_limit == 10 and dep.spec.progress_deadline_seconds == 600
    tpl = dep.spec.template.spec
    assert (tpl.restart_policy, tpl.dns_policy, tpl.scheduler_name, tpl.termination_grace_period_seconds) == \
        ("Always", "ClusterFirst", "default-scheduler", 30)
    main, sidecar = tpl.containers
    assert main.image_pull_policy == "IfNotPresent" and sidecar.image_pull_policy == "Always"
    assert main.termination_message_path == "/dev/termination-log"
    assert main.termination_message_policy == "File"
    pod = v1.create_namespaced_pod(NS, {"apiVersion": "v1", "kind": "Pod",
                                        "metadata": {"generateName": "job-", "labels": {"app": "job"}},
                                        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
                                        "status": {"phase": "Running"}})
    assert pod.metadata.name.startswith("job-") and len(pod.metadata.name) == 9
    assert pod.status.phase == "Pending" and pod.status.qos_class == "BestEffort"
    assert pod.spec.service_account_name == "default" and pod.spec.enable_service_links is True
    assert {t.key for t in pod.spec.tolerations} == {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
    svc = v1.create_namespaced_service(NS, {"metadata": {"name": "api"},
                                            "spec": {"selector": {"app": "api"}, "ports": [{"port": 80}]}})
    assert svc.spec.cluster_ip.startswith("10.96.") and svc.spec.cluster_ip != "10.96.0.20"
    assert svc.spec.ports[0].target_port == 80 and svc.spec.ports[0].protocol == "TCP"
    with expect_error(409, "AlreadyExists") as e:
        apps.create_namespaced_deployment(NS, _deployment("api"))
    assert e.status["message"] == 'deployments.apps "api" already exists'
    with expect_error(404, "NotFound") as e:
        v1.create_namespaced_config_map("ghost", {"metadata": {"name": "x"}})
    assert e.status["message"] == 'namespaces "ghost" not found'


def test_validation_errors_are_422_with_causes(http):
    bad = _deployment("bad")
    del bad["spec"]["selector"]
    bad["spec"]["template"]["spec"]["containers"] = []
    r = http("POST", "/apis/apps/v1/namespaces/shop/deployments", bad)
    assert r.status == 422
    st = r.json()
    assert st["reason"] == "Invalid" and st["details"]["kind"] == "Deployment" and st["details"]["name"] == "bad"
    fields = {c["field"]: c["reason"] for c in st["details"]["causes"]}
    assert fields == {"spec.selector": "FieldValueRequired", "spec.template.spec.containers": "FieldValueRequired"}
    assert st["message"].startswith('Deployment.apps "bad" is invalid: [spec.selector: Required value')
    mismatch = _deployment("mm")
    mismatch["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    st = http("POST", "/apis/apps/v1/namespaces/shop/deployments", mismatch).json()
    assert st["details"]["causes"][0]["field"] == "spec.template.metadata.labels"
    assert "`selector` does not match template `labels`" in st["message"]
    r = http("POST", "/api/v1/namespaces/shop/pods", {"metadata": {"name": "p"}, "spec": {}})
    assert r.status == 422 and r.json()["details"]["causes"][0]["field"] == "spec.containers"
    r = http("POST", "/api/v1/namespaces/shop/pods", b"{not json")
    assert r.status == 400 and r.json()["reason"] == "BadRequest"
    assert http("POST", "/api/v1/namespaces/shop/pods/x", {}).json()["reason"] == "MethodNotAllowed"


def test_update_conflicts_and_status_preservation(client):
    apps = k8s.AppsV1Api(client)
    dep = apps.read_namespaced_deployment("web", NS)
    stale_rv = dep.metadata.resource_version
    dep.spec.replicas = 4
    dep.status = None  # the main resource ignores status: it must survive
    updated = apps.replace_namespaced_deployment("web", NS, dep)
    assert updated.spec.replicas == 4 and updated.metadata.generation == 2
    assert updated.status.ready_replicas == 2
    dep.metadata.resource_version = stale_rv
    with expect_error(409, "Conflict") as e:
        apps.replace_namespaced_deployment("web", NS, dep)
    assert e.status["message"] == ('Operation cannot be fulfilled on deployments.apps "web": the object has been '
                                   'modified; please apply your changes to the latest version and try again')
    assert e.status["details"] == {"name": "web", "group": "apps", "kind": "deployments"}  # as the real server says
    # status subresource changes status only
    dep = apps.read_namespaced_deployment("web", NS)
    dep.status.observed_generation = dep.metadata.generation
    dep.spec.replicas = 9
    after = apps.replace_namespaced_deployment_status("web", NS, dep)
    assert after.status.observed_generation == 2 and after.spec.replicas == 4
    after = apps.patch_namespaced_deployment_status("web", NS, {"status": {"readyReplicas": 1}})
    assert after.status.ready_replicas == 1 and after.metadata.generation == 2


def test_pod_spec_is_mostly_immutable(client):
    v1 = k8s.CoreV1Api(client)
    v1.patch_namespaced_pod(POD_A, NS, {"spec": {"containers": [{"name": "web", "image": "registry.local/web:9"}]}})
    with expect_error(422, "Invalid") as e:
        v1.patch_namespaced_pod(POD_A, NS, {"spec": {"containers": [{"name": "web", "resources": {
            "limits": {"memory": "1Gi"}}}]}})
    assert "pod updates may not change fields other than" in e.status["message"]


def test_writes_do_not_add_defaults_to_untouched_parts_of_simulation_objects(twin, client):
    # the simulation creates objects straight in the store, without the API's defaults
    with twin.store.lock:
        dep = twin.store.create({"apiVersion": "apps/v1", "kind": "Deployment",
                                 "metadata": {"name": "bare", "namespace": NS},
                                 "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "bare"}},
                                          "template": {"metadata": {"labels": {"app": "bare"}},
                                                       "spec": {"containers": [{"name": "c", "image": "x:1"}]}}}})
        template = json.loads(json.dumps(dep["spec"]["template"]))
        twin.store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare-1", "namespace": NS},
                           "spec": {"containers": [{"name": "c", "image": "x:1"}], "nodeName": "node-a1"}})
    apps, v1 = k8s.AppsV1Api(client), k8s.CoreV1Api(client)
    apps.patch_namespaced_deployment("bare", NS, {"metadata": {"annotations": {"a": "b"}}})
    apps.patch_namespaced_deployment("bare", NS, {"spec": {"paused": True}})
    assert twin.store.get("Deployment", NS, "bare")["spec"]["template"] == template  # no spurious rollout
    v1.patch_namespaced_pod("bare-1", NS, {"metadata": {"labels": {"l": "v"}}})
    v1.patch_namespaced_pod("bare-1", NS, {"spec": {"containers": [{"name": "c", "image": "x:2"}]}})
    assert twin.store.get("Pod", NS, "bare-1")["spec"]["containers"][0]["image"] == "x:2"
    with expect_error(422, "Invalid"):
        v1.patch_namespaced_pod("bare-1", NS, {"spec": {"containers": [{"name": "c", "args": ["-v"]}]}})


def test_strategic_merge_patch_semantics(client):
    apps = k8s.AppsV1Api(client)
    apps.create_namespaced_deployment(NS, _deployment("smp"))
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "sidecar", "image": "registry.local/proxy:2", "env": [{"name": "X", "value": "1"}]},
        {"name": "debug", "image": "busybox:1.36"}]}}}}
    dep = apps.patch_namespaced_deployment("smp", NS, patch)
    names = [c.name for c in dep.spec.template.spec.containers]
    assert names == ["main", "sidecar", "debug"]
    assert dep.spec.template.spec.containers[1].image == "registry.local/proxy:2"
    assert dep.spec.template.spec.containers[2].image_pull_policy == "IfNotPresent"  # defaulted after patch
    assert dep.metadata.generation == 2
    # env merges by name; $patch: delete removes an element; null deletes a field
    dep = apps.patch_namespaced_deployment("smp", NS, {"metadata": {"labels": {"app": None, "team": "a"}},
                                                       "spec": {"template": {"spec": {"containers": [
                                                           {"name": "sidecar", "env": [{"name": "Y", "value": "2"}]},
                                                           {"name": "debug", "$patch": "delete"}]}}}})
    assert dep.metadata.labels == {"team": "a"}
    assert [c.name for c in dep.spec.template.spec.containers] == ["main", "sidecar"]
    assert [(e.name, e.value) for e in dep.spec.template.spec.containers[1].env] == [("X", "1"), ("Y", "2")]
    # $setElementOrder reorders; $patch: replace on a list replaces it
    dep = apps.patch_namespaced_deployment("smp", NS, {"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "main"}],
        "containers": [{"name": "main", "image": "registry.local/smp:2"}]}}}})
    assert [c.name for c in dep.spec.template.spec.containers] == ["sidecar", "main"]
    assert dep.spec.template.spec.containers[1].image == "registry.local/smp:2"
    dep = apps.patch_namespaced_deployment("smp", NS, {"spec": {"template": {"spec": {"containers": [
        {"$patch": "replace"}, {"name": "solo", "image": "registry.local/solo:1"}]}}}})
    assert [c.name for c in dep.spec.template.spec.containers] == ["solo"]
    # finalizers merge as a set; $deleteFromPrimitiveList removes from it
    dep = apps.patch_namespaced_deployment("smp", NS, {"metadata": {"finalizers": ["a.io/x", "b.io/y"]}})
    dep = apps.patch_namespaced_deployment("smp", NS, {"metadata": {"finalizers": ["c.io/z"]}})
    assert dep.metadata.finalizers == ["a.io/x", "b.io/y", "c.io/z"]
    dep = apps.patch_namespaced_deployment("smp", NS, {"metadata": {
        "$deleteFromPrimitiveList/finalizers": ["b.io/y"]}})
    assert dep.metadata.finalizers == ["a.io/x", "c.io/z"]
    # Service ports merge on port
    v1 = k8s.CoreV1Api(client)
    svc = v1.patch_namespaced_service("web", NS, {"spec": {"ports": [{"port": 443, "name": "https",
                                                                      "targetPort": 8443}]}})
    assert [p.port for p in svc.spec.ports] == [80, 443]


def test_merge_json_and_apply_patches(client, http):
    apps = k8s.AppsV1Api(client)
    r = http("PATCH", "/apis/apps/v1/namespaces/shop/deployments/web", {"spec": {"replicas": 3}},
             headers={"Content-Type": "application/merge-patch+json"})
    assert r.status == 200 and r.json()["spec"]["replicas"] == 3
    dep = apps.patch_namespaced_deployment("web", NS, [
        {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "registry.local/web:2"},
        {"op": "add", "path": "/metadata/annotations/owner", "value": "team-a"},
        {"op": "test", "path": "/spec/replicas", "value": 3}])
    assert dep.spec.template.spec.containers[0].image == "registry.local/web:2"
    assert dep.metadata.annotations["owner"] == "team-a"
    r = http("PATCH", "/apis/apps/v1/namespaces/shop/deployments/web", [{"op": "test", "path": "/spec/replicas",
                                                                          "value": 7}],
             headers={"Content-Type": "application/json-patch+json"})
    assert r.status == 422 and r.json()["reason"] == "Invalid"
    r = http("PATCH", "/apis/apps/v1/namespaces/shop/deployments/web", {"spec": {}},
             headers={"Content-Type": "text/plain"})
    assert r.status == 415
    # a stale resourceVersion inside a merge patch is a conflict (kubectl label --resource-version)
    r = http("PATCH", "/api/v1/namespaces/shop/pods/" + POD_A,
             {"metadata": {"resourceVersion": "1", "labels": {"x": "y"}}},
             headers={"Content-Type": "application/merge-patch+json"})
    assert r.status == 409 and r.json()["reason"] == "Conflict"
    # server-side apply creates, then merges
    applied = _deployment("ssa", replicas=1)
    created = apps.patch_namespaced_deployment("ssa", NS, applied, field_manager="test",
                                               _content_type="application/apply-patch+yaml")
    assert created.spec.replicas == 1 and created.metadata.managed_fields[0].manager == "test"
    applied["spec"]["replicas"] = 3
    again = apps.patch_namespaced_deployment("ssa", NS, applied, field_manager="test",
                                             _content_type="application/apply-patch+yaml")
    assert again.spec.replicas == 3 and again.metadata.uid == created.metadata.uid


def test_dry_run_does_not_persist(client):
    apps = k8s.AppsV1Api(client)
    dep = apps.patch_namespaced_deployment("web", NS, {"spec": {"replicas": 5}}, dry_run="All")
    assert dep.spec.replicas == 5
    assert apps.read_namespaced_deployment("web", NS).spec.replicas == 2


def test_scale_subresource(client):
    apps = k8s.AppsV1Api(client)
    scale = apps.read_namespaced_deployment_scale("web", NS)
    assert (scale.kind, scale.api_version) == ("Scale", "autoscaling/v1")
    assert scale.spec.replicas == 2 and scale.status.replicas == 2 and scale.status.selector == "app=web"
    scale = apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 4}})
    assert scale.spec.replicas == 4
    assert apps.read_namespaced_deployment("web", NS).spec.replicas == 4
    scale.spec.replicas = 3
    assert apps.replace_namespaced_deployment_scale("web", NS, scale).spec.replicas == 3
    with expect_error(409, "Conflict"):
        apps.replace_namespaced_deployment_scale("web", NS, scale)  # scale.metadata.resourceVersion is now stale
    assert apps.patch_namespaced_replica_set_scale("web-5f8d7c9b4", NS, {"spec": {"replicas": 1}}).spec.replicas == 1


def test_admission_sees_the_object_after_the_change(twin, client):
    apps = k8s.AppsV1Api(client)
    with expect_error(403, "Forbidden") as e:
        apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 0}})
    assert "no-scale-to-zero" in e.status["message"]
    req, decision, status = twin.admission.records[-1]
    assert (req.actor, req.channel, req.verb, req.resource, req.namespace, req.name, req.subresource, req.app) == \
        ("agent", "kube", "patch", "deployments", NS, "web", "scale", NS)
    assert req.body["kind"] == "Deployment" and req.body["spec"]["replicas"] == 0
    assert not decision.allowed and status == 403
    assert apps.read_namespaced_deployment("web", NS).spec.replicas == 2
    with expect_error(403, "Forbidden"):
        apps.delete_namespaced_deployment("web", NS)
    apps.patch_namespaced_deployment("web", NS, {"metadata": {"labels": {"checked": "yes"}}})
    req, decision, status = twin.admission.records[-1]
    assert decision.allowed and status == 200 and req.body["metadata"]["labels"]["checked"] == "yes"
    with expect_error(404, "NotFound"):
        apps.patch_namespaced_deployment("ghost", NS, {"metadata": {"labels": {"a": "b"}}})
    assert twin.admission.records[-1][2] == 404
    operator = twin.operator_client()
    try:
        k8s.AppsV1Api(operator).patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 0}})
    finally:
        operator.close()
    assert twin.admission.records[-1][0].actor == "operator" and twin.admission.records[-1][2] == 200


def test_delete_cascades_through_owner_references(twin, client):
    v1 = k8s.CoreV1Api(client)
    deleted = v1.delete_namespaced_pod(POD_A, NS)  # the client hands deletes back as plain dicts
    deleted = deleted if isinstance(deleted, dict) else deleted.to_dict()
    assert deleted["kind"] == "Pod" and deleted["metadata"]["name"] == POD_A
    assert twin.admission.records[-1][0].verb == "delete" and twin.admission.records[-1][2] == 200
    operator = twin.operator_client()
    try:
        apps = k8s.AppsV1Api(operator)
        st = apps.delete_namespaced_deployment("web", NS)
        st = st if isinstance(st, dict) else st.to_dict()
        assert st["kind"] == "Status" and st["status"] == "Success" and st["details"]["name"] == "web"
    finally:
        operator.close()
    assert twin.store.list("ReplicaSet", NS) == [] and twin.store.list("Pod", NS) == []
    assert twin.store.get("Service", NS, "web") is not None


def test_orphan_propagation_keeps_dependents(twin, http):
    r = http("DELETE", "/apis/apps/v1/namespaces/shop/replicasets/web-7d4b9c8f6d",
             {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"}, token=twin.operator_token)
    assert r.status == 200
    pods = twin.store.list("Pod", NS)
    assert len(pods) == 2 and all("ownerReferences" not in p["metadata"] for p in pods)
    r = http("DELETE", "/api/v1/namespaces/shop/pods/" + POD_A, {"preconditions": {"uid": "not-it"}})
    assert r.status == 409 and "Precondition failed: UID in precondition" in r.json()["message"]


def test_deletecollection_and_namespace_deletion(twin, http):
    r = http("DELETE", "/api/v1/namespaces/shop/pods?labelSelector=app%3Dweb")
    assert r.status == 200 and len(r.json()["items"]) == 2
    assert twin.store.list("Pod", NS) == []
    r = http("DELETE", "/api/v1/namespaces/shop", token=twin.operator_token)
    assert r.status == 200
    assert twin.store.list("Deployment") == [] and twin.store.get("Namespace", None, NS) is None
    r = http("DELETE", "/api/v1/namespaces/default")
    assert r.status == 403 and "no-delete-namespace" in r.json()["message"]


def test_eviction_deletes_the_pod(twin, client):
    v1 = k8s.CoreV1Api(client)
    v1.create_namespaced_pod_eviction(POD_A, NS, {"apiVersion": "policy/v1", "kind": "Eviction",
                                                  "metadata": {"name": POD_A, "namespace": NS}})
    assert twin.store.get("Pod", NS, POD_A) is None
    req, decision, status = twin.admission.records[-1]
    assert (req.verb, req.subresource, status) == ("evict", "eviction", 201)
    with expect_error(404, "NotFound"):
        v1.create_namespaced_pod_eviction(POD_A, NS, {"metadata": {"name": POD_A}})


def test_pod_logs_and_their_parameters(twin, client):
    t0 = twin.clock() - timedelta(minutes=10)
    twin.telemetry.logs[(NS, POD_B, "web", False)] = [(t0 + timedelta(minutes=i), f"line {i}") for i in range(10)]
    twin.telemetry.logs[(NS, POD_B, "web", True)] = [(t0, "Traceback (most recent call last):"), (t0, "MemoryError")]
    v1 = k8s.CoreV1Api(client)
    assert v1.read_namespaced_pod_log(POD_B, NS).splitlines() == [f"line {i}" for i in range(10)]
    assert v1.read_namespaced_pod_log(POD_B, NS, container="web", tail_lines=2) == "line 8\nline 9\n"
    assert v1.read_namespaced_pod_log(POD_B, NS, since_seconds=120).splitlines() == ["line 8", "line 9"]
    stamped = v1.read_namespaced_pod_log(POD_B, NS, timestamps=True, tail_lines=1)
    assert stamped == (t0 + timedelta(minutes=9)).strftime("%Y-%m-%dT%H:%M:%S") + ".000000000Z line 9\n"
    assert v1.read_namespaced_pod_log(POD_B, NS, limit_bytes=8) == "line 0\nl"
    assert v1.read_namespaced_pod_log(POD_B, NS, previous=True).endswith("MemoryError\n")
    with expect_error(400, "BadRequest") as e:
        v1.read_namespaced_pod_log(POD_A, NS, previous=True)
    assert e.status["message"] == f'previous terminated container "web" in pod "{POD_A}" not found'
    with expect_error(400, "BadRequest") as e:
        v1.read_namespaced_pod_log(POD_A, NS, container="nope")
    assert e.status["message"] == f"container nope is not valid for pod {POD_A}"
    v1.create_namespaced_pod(NS, {"metadata": {"name": "fresh"}, "spec": {"containers": [{"name": "c",
                                                                                          "image": "x:1"}]}})
    with expect_error(400, "BadRequest") as e:
        v1.read_namespaced_pod_log("fresh", NS)
    assert e.status["message"] == 'container "c" in pod "fresh" is waiting to start: ContainerCreating'


def test_metrics_api(client):
    metrics = k8s.CustomObjectsApi(client)
    nodes = metrics.list_cluster_custom_object("metrics.k8s.io", "v1beta1", "nodes")
    assert nodes["kind"] == "NodeMetricsList"
    assert nodes["items"][0]["usage"] == {"cpu": "850m", "memory": f"{3 * 1024 * 1024}Ki"}
    pods = metrics.list_namespaced_custom_object("metrics.k8s.io", "v1beta1", NS, "pods")
    assert {p["metadata"]["name"] for p in pods["items"]} == {POD_A, POD_B}
    assert pods["items"][0]["containers"][0]["name"] == "web"


# -- watch ------------------------------------------------------------------------------------

def test_watch_streams_changes_from_a_resource_version(twin, client):
    v1 = k8s.CoreV1Api(client)
    listing = v1.list_namespaced_pod(NS)
    rv = listing.metadata.resource_version

    def change() -> None:
        time.sleep(0.3)
        with twin.store.lock:
            pod = twin.store.get("Pod", NS, POD_A)
            pod["status"]["phase"] = "Failed"
            twin.store.touch(pod)
            twin.store.delete("Pod", NS, POD_B)

    threading.Thread(target=change, daemon=True).start()
    w = watch.Watch()
    seen = []
    for ev in w.stream(v1.list_namespaced_pod, NS, resource_version=rv, timeout_seconds=5):
        seen.append((ev["type"], ev["object"].metadata.name, ev["object"].status.phase))
        if len(seen) == 2:
            w.stop()
    assert seen == [("MODIFIED", POD_A, "Failed"), ("DELETED", POD_B, "Running")]


def test_watch_with_field_selector_sends_deleted_when_an_object_stops_matching(twin, http):
    import http.client as hc

    conn = hc.HTTPConnection("127.0.0.1", twin.server.port, timeout=10)
    rv = http("GET", "/api/v1/namespaces/shop/pods").json()["metadata"]["resourceVersion"]
    conn.request("GET", f"/api/v1/namespaces/shop/pods?watch=true&resourceVersion={rv}"
                        f"&fieldSelector=status.phase%3DRunning&timeoutSeconds=3",
                 headers={"Authorization": f"Bearer {twin.agent_token}"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Transfer-Encoding") == "chunked"
    with twin.store.lock:
        pod = twin.store.get("Pod", NS, POD_A)
        pod["status"]["phase"] = "Succeeded"
        twin.store.touch(pod)
    line = json.loads(resp.readline())
    assert line["type"] == "DELETED" and line["object"]["metadata"]["name"] == POD_A
    conn.close()


def test_watch_edge_cases(twin, http):
    # an unset resourceVersion starts with synthetic ADDED events for what exists
    r = http("GET", "/api/v1/namespaces/shop/configmaps?watch=1&timeoutSeconds=1")
    events = [json.loads(line) for line in r.body.splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "web-config")]
    # sendInitialEvents=true is refused so that clients fall back to list+watch
    r = http("GET", "/api/v1/namespaces/shop/pods?watch=1&sendInitialEvents=true"
                    "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")
    assert r.status == 422 and r.json()["reason"] == "Invalid"
    # a resourceVersion older than the watch history gets 410 Expired in the stream
    twin.store._history = type(twin.store._history)(list(twin.store._history)[-3:], maxlen=3)
    r = http("GET", "/api/v1/namespaces/shop/pods?watch=1&resourceVersion=2")
    ev = json.loads(r.body.splitlines()[0])
    assert ev["type"] == "ERROR" and ev["object"]["code"] == 410 and ev["object"]["reason"] == "Expired"


def test_watch_bookmarks(twin, http):
    twin.server.watch_bookmark_interval = 0.2
    rv = twin.store.resource_version
    r = http("GET", f"/apis/apps/v1/namespaces/shop/deployments?watch=1&resourceVersion={rv}"
                    f"&allowWatchBookmarks=true&timeoutSeconds=1")
    events = [json.loads(line) for line in r.body.splitlines()]
    assert events and all(e["type"] == "BOOKMARK" for e in events)
    assert events[0]["object"]["kind"] == "Deployment"
    assert events[0]["object"]["metadata"]["resourceVersion"] == str(rv)


# -- extensions -------------------------------------------------------------------------------

def test_extension_handlers_get_the_actor(twin, http):
    r = http("GET", "/sremarathon/v1/pipeline/shop/changes?since=1")
    assert r.status == 200 and r.json() == {"items": [], "path": "/sremarathon/v1/pipeline/shop/changes"}
    r = http("POST", "/sremarathon/v1/pipeline/shop/revert", {"change": "c1"}, token=twin.operator_token)
    assert r.status == 200 and r.body == b"ok\n" and r.headers["content-type"] == "text/plain"
    get, post = twin.extension_calls
    assert (get.actor, get.query, get.body) == ("agent", {"since": "1"}, None)
    assert (post.actor, post.method, post.body) == ("operator", "POST", {"change": "c1"})
    assert http("GET", "/sremarathon/v1/pipeline/shop/changes", token=None).status == 401
