"""The Python `kubernetes` client against testenv's real members (the shared testenv the test
command starts): each member answers typed calls, so the harness serves what real clients
expect. Skipped when no testenv is set (FLOTILLA_TESTENV_DIR), failed when one is required."""

import json
import os
import uuid

import pytest
from kubernetes import client, config


def members():
    directory = os.environ.get("FLOTILLA_TESTENV_DIR")
    if not directory:
        if os.environ.get("FLOTILLA_REQUIRE_TESTENV") == "1":
            pytest.fail("FLOTILLA_TESTENV_DIR is not set but FLOTILLA_REQUIRE_TESTENV=1")
        pytest.skip("no shared testenv (set FLOTILLA_TESTENV_DIR)")
    with open(os.path.join(directory, "ready.json")) as f:
        return json.load(f)["members"]


def test_every_member_serves_the_python_client():
    found = members()
    assert len(found) >= 3
    for m in found:
        api = config.new_client_from_config(config_file=m["kubeconfig"])
        core = client.CoreV1Api(api)
        assert core.read_namespace("default").metadata.name == "default"
        name = "py-" + uuid.uuid4().hex[:8]
        body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"from": "python"})
        created = core.create_namespaced_config_map("default", body)
        assert created.data == {"from": "python"}
        assert core.read_namespaced_config_map(name, "default").metadata.uid == created.metadata.uid
        core.delete_namespaced_config_map(name, "default")
        version = client.VersionApi(api).get_code()
        assert version.major == "1", m["name"]
