"""The Python `kubernetes` client (pinned in requirements.txt) against `flotilla up`.

Every response is decoded into the client's strict pydantic models (the typed API methods do
that), so a wrong JSON type or a missing required field fails the test.
"""

import json
import os
import re
import subprocess
import tempfile
import threading
import time

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException


@pytest.fixture(scope="session")
def kubeconfig():
    binary = os.environ.get("FLOTILLA_BIN")
    assert binary and os.path.exists(binary), "set FLOTILLA_BIN to the flotilla binary"
    data = tempfile.mkdtemp(prefix="flotilla-py-")
    proc = subprocess.Popen(
        [binary, "up", "--listen", "127.0.0.1:0", "--data-dir", os.path.join(data, "data")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "FLOTILLA_LOG": "warn"},
    )
    path = None
    deadline = time.time() + 60
    while path is None and time.time() < deadline:
        line = proc.stdout.readline()
        m = re.match(r"flotilla: admin kubeconfig: (.*)", line.strip())
        if m:
            path = m.group(1)
    assert path, "flotilla up did not start"
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    yield path
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture(scope="session")
def api(kubeconfig):
    return config.new_client_from_config(config_file=kubeconfig)


@pytest.fixture
def ns(api, request):
    name = "py-" + re.sub(r"[^a-z0-9]", "-", request.node.name.lower())[:40].strip("-")
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def test_version_and_discovery(api):
    v = client.VersionApi(api).get_code()
    assert v.major == "1" and v.git_version.startswith("v1.")
    groups = client.ApisApi(api).get_api_versions()
    assert any(g.name == "apps" for g in groups.groups)
    core = client.CoreApi(api).get_api_versions()
    assert core.versions == ["v1"]
    resources = client.CoreV1Api(api).get_api_resources()
    assert any(r.name == "configmaps" and r.namespaced for r in resources.resources)


def test_configmap_crud(api, ns):
    core = client.CoreV1Api(api)
    cm = core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c1", labels={"app": "x"}), data={"k": "v"}))
    assert cm.metadata.uid and cm.metadata.resource_version
    got = core.read_namespaced_config_map("c1", ns)
    assert got.data == {"k": "v"}
    got.data["k"] = "w"
    replaced = core.replace_namespaced_config_map("c1", ns, got)
    assert int(replaced.metadata.resource_version) > int(cm.metadata.resource_version)
    # A stale update is a 409.
    with pytest.raises(ApiException) as e:
        core.replace_namespaced_config_map("c1", ns, got)
    assert e.value.status == 409
    lst = core.list_namespaced_config_map(ns, label_selector="app=x")
    assert [i.metadata.name for i in lst.items] == ["c1"]
    assert lst.metadata.resource_version
    core.delete_namespaced_config_map("c1", ns)
    with pytest.raises(ApiException) as e:
        core.read_namespaced_config_map("c1", ns)
    assert e.value.status == 404
    assert json.loads(e.value.body)["reason"] == "NotFound"


def test_deployment_with_defaults_and_scale(api, ns):
    apps = client.AppsV1Api(api)
    dep = client.V1Deployment(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1DeploymentSpec(
            replicas=2,
            selector=client.V1LabelSelector(match_labels={"app": "web"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "web"}),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="nginx", resources=client.V1ResourceRequirements(requests={"cpu": "0.5", "memory": "1024Mi"}))]),
            ),
        ),
    )
    created = apps.create_namespaced_deployment(ns, dep)
    assert created.metadata.generation == 1
    assert created.spec.strategy.type == "RollingUpdate"
    assert created.spec.revision_history_limit == 10
    c = created.spec.template.spec.containers[0]
    assert c.image_pull_policy == "Always"
    assert c.resources.requests == {"cpu": "500m", "memory": "1Gi"}
    scale = apps.read_namespaced_deployment_scale("web", ns)
    assert scale.spec.replicas == 2 and scale.status.replicas == 0
    apps.patch_namespaced_deployment_scale("web", ns, {"spec": {"replicas": 5}})
    assert apps.read_namespaced_deployment("web", ns).spec.replicas == 5


def test_patches(api, ns):
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment(
        ns,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "p"},
            "spec": {
                "selector": {"matchLabels": {"a": "b"}},
                "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "one", "image": "i1"}, {"name": "two", "image": "i2"}]}},
            },
        },
    )
    # A dict body is a strategic merge patch: containers merge by name.
    apps.patch_namespaced_deployment("p", ns, {"spec": {"template": {"spec": {"containers": [{"name": "two", "image": "i2b"}]}}}})
    got = apps.read_namespaced_deployment("p", ns)
    assert [(c.name, c.image) for c in got.spec.template.spec.containers] == [("one", "i1"), ("two", "i2b")]
    # A list body is a JSON patch.
    apps.patch_namespaced_deployment("p", ns, [{"op": "replace", "path": "/spec/replicas", "value": 3}])
    assert apps.read_namespaced_deployment("p", ns).spec.replicas == 3
    # Custom-object style merge patch on a built-in via the generic API.
    custom = client.CustomObjectsApi(api)
    custom.patch_namespaced_custom_object("apps", "v1", ns, "deployments", "p", {"metadata": {"labels": {"merged": "yes"}}})
    assert apps.read_namespaced_deployment("p", ns).metadata.labels == {"merged": "yes"}


def test_watch(api, ns):
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="w0")))
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    events = []

    def writer():
        time.sleep(0.5)
        core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="w1"), data={"a": "1"}))
        core.patch_namespaced_config_map("w1", ns, {"data": {"a": "2"}})
        core.delete_namespaced_config_map("w1", ns)

    t = threading.Thread(target=writer)
    t.start()
    w = watch.Watch()
    for ev in w.stream(core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=20):
        events.append((ev["type"], ev["object"].metadata.name, (ev["object"].data or {}).get("a")))
        if ev["type"] == "DELETED":
            w.stop()
    t.join()
    assert events == [("ADDED", "w1", "1"), ("MODIFIED", "w1", "2"), ("DELETED", "w1", "2")]


def test_errors_are_statuses(api, ns):
    core = client.CoreV1Api(api)
    with pytest.raises(ApiException) as e:
        core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="Bad_Name")))
    assert e.value.status == 422
    body = json.loads(e.value.body)
    assert body["reason"] == "Invalid" and body["details"]["causes"][0]["field"] == "metadata.name"
    with pytest.raises(ApiException) as e:
        core.list_namespaced_config_map(ns, label_selector="a in (b")
    assert e.value.status == 400
