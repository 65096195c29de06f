#!/usr/bin/env python3
"""Record patch and selector golden files from a real kube-apiserver.

Usage: regen-api-golden.py KUBECONFIG DATA_DIR

Writes DATA_DIR/patch-golden/<case>.json and DATA_DIR/selector-golden.json. The inputs below
(objects, patches, selectors) are written by hand; every expected output is the server's answer.

Patch cases: the object is created, the server's answer (defaulted) is recorded as the input,
then the patch is sent with dryRun=All and the answer recorded. Volatile values (namespace,
uid, creationTimestamp, resourceVersion, cluster IPs) are replaced by fixed placeholders in both
and managedFields are dropped, so regenerating gives the same files. Patches add only complete
elements (with the fields defaulting would add) so that the answer differs from the input by the
patch alone; the Rust test compares after dropping nulls and empty maps/lists, which the typed
round trip in the server drops.
"""
import base64
import copy
import http.client
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSONP = "application/json-patch+json"

# ---------------------------------------------------------------------------------------------
# Objects


def container(name, image, **extra):
    """A container with the fields pod defaulting fills in, so patches adding it stay exact."""
    c = {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent" if ":" in image and not image.endswith(":latest") else "Always",
        "resources": {},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    c.update(extra)
    return c


def deployment(name):
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "labels": {"app": "web", "team": "a"},
            "annotations": {"note": "x"},
            "finalizers": ["example.com/a", "example.com/b", "example.com/c"],
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": "web", "tier": "front"}},
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": "nginx:1.25",
                            "ports": [
                                {"containerPort": 80, "name": "http", "protocol": "TCP"},
                                {"containerPort": 443, "name": "https", "protocol": "TCP"},
                            ],
                            "env": [
                                {"name": "A", "value": "1"},
                                {"name": "B", "value": "2"},
                                {"name": "C", "value": "3"},
                            ],
                            "volumeMounts": [
                                {"name": "data", "mountPath": "/data"},
                                {"name": "cache", "mountPath": "/cache"},
                            ],
                        },
                        {"name": "sidecar", "image": "busybox:1.36", "args": ["sleep", "3600"]},
                    ],
                    "volumes": [
                        {"name": "data", "emptyDir": {}},
                        {"name": "cache", "configMap": {"name": "cache-cm"}},
                    ],
                    "nodeSelector": {"disk": "ssd"},
                    "tolerations": [{"key": "a", "operator": "Exists"}],
                },
            },
        },
    }


def service(name):
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "selector": {"app": "web"},
            "ports": [
                {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                {"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"},
            ],
        },
    }


def service_account(name):
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name},
        "secrets": [{"name": "s1"}, {"name": "s2"}],
        "imagePullSecrets": [{"name": "p1"}],
    }


def config_map(name):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "data": {"a": "1", "b": "2"},
    }


def pdb(name):
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {
            "minAvailable": 1,
            "selector": {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}],
            },
        },
    }


def controller_revision(name):
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {"name": name},
        "revision": 1,
        "data": {"spec": {"a": 1}},
    }


def config_map_html(name):
    cm = config_map(name)
    cm["data"]["h"] = "a<b>&c"
    return cm


def widget_null(name):
    w = widget(name)
    w["spec"]["gone"] = None
    return w


def widget(name):
    return {
        "apiVersion": "golden.flotilla.io/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": 3, "items": [{"a": 1}, {"b": 2}], "nested": {"x": 1, "y": {"z": 2}}},
    }


RESOURCES = {
    "Deployment": ("apis/apps/v1", "deployments"),
    "Service": ("api/v1", "services"),
    "ServiceAccount": ("api/v1", "serviceaccounts"),
    "ConfigMap": ("api/v1", "configmaps"),
    "PodDisruptionBudget": ("apis/policy/v1", "poddisruptionbudgets"),
    "ControllerRevision": ("apis/apps/v1", "controllerrevisions"),
    "Widget": ("apis/golden.flotilla.io/v1", "widgets"),
}

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.golden.flotilla.io"},
    "spec": {
        "group": "golden.flotilla.io",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "scope": "Namespaced",
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }},
        }],
    },
}

# ---------------------------------------------------------------------------------------------
# Patch cases: (name, description, object builder, content type, patch)

C_WEB = {"name": "web"}


def tmpl(spec):
    return {"spec": {"template": {"spec": spec}}}


def web(**fields):
    d = {"name": "web"}
    d.update(fields)
    return tmpl({"containers": [d]})


CASES = [
    # --- strategic merge patch: lists merged by key
    ("smp-container-image", "containers merge by name: only web's image changes",
     deployment, SMP, web(image="nginx:1.26")),
    ("smp-container-add", "a new container goes before the existing ones",
     deployment, SMP, tmpl({"containers": [container("extra", "redis:7")]})),
    ("smp-container-patch-delete", "$patch: delete removes the element with that merge key",
     deployment, SMP, tmpl({"containers": [{"name": "sidecar", "$patch": "delete"}]})),
    ("smp-container-patch-delete-missing", "$patch: delete of a key that is not there is a no-op",
     deployment, SMP, tmpl({"containers": [{"name": "nope", "$patch": "delete"}]})),
    ("smp-containers-patch-replace", "$patch: replace as a list element replaces the whole list",
     deployment, SMP, tmpl({"containers": [{"$patch": "replace"}, container("only", "redis:7")]})),
    ("smp-env-merge", "env merges by name: change, add, delete in one patch",
     deployment, SMP, web(env=[{"name": "B", "value": "20"}, {"name": "D", "value": "4"},
                               {"name": "A", "$patch": "delete"}])),
    ("smp-env-null-in-new-element", "nulls inside an appended element are dropped",
     deployment, SMP, web(env=[{"name": "E", "value": None}])),
    ("smp-env-set-element-order", "$setElementOrder orders the merged list (kubectl apply)",
     deployment, SMP, {"spec": {"template": {"spec": {
         "$setElementOrder/containers": [{"name": "web"}, {"name": "sidecar"}],
         "containers": [{"name": "web", "$setElementOrder/env": [{"name": "C"}, {"name": "A"}, {"name": "B"}],
                         "env": [{"name": "A", "value": "10"}]}]}}}}),
    ("smp-env-set-element-order-add", "$setElementOrder with a new element placed in the middle",
     deployment, SMP, {"spec": {"template": {"spec": {"containers": [{
         "name": "web", "$setElementOrder/env": [{"name": "A"}, {"name": "N"}, {"name": "B"}, {"name": "C"}],
         "env": [{"name": "N", "value": "new"}]}]}}}}),
    ("smp-containers-reorder", "$setElementOrder/containers alone reorders the containers",
     deployment, SMP, {"spec": {"template": {"spec": {
         "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "web"}]}}}}),
    ("smp-set-element-order-mismatch", "a patch element missing from $setElementOrder is an error",
     deployment, SMP, {"spec": {"template": {"spec": {"containers": [{
         "name": "web", "$setElementOrder/env": [{"name": "A"}], "env": [{"name": "B", "value": "x"}]}]}}}}),
    ("smp-patch-new-element-first", "new elements go before or after by patch order",
     deployment, SMP, web(env=[{"name": "Z", "value": "z"}, {"name": "A", "value": "1a"}])),
    ("smp-ports-merge", "ports merge by containerPort",
     deployment, SMP, web(ports=[{"containerPort": 8080, "name": "alt", "protocol": "TCP"},
                                 {"containerPort": 80, "name": "web"}])),
    ("smp-volume-mounts", "volumeMounts merge by mountPath",
     deployment, SMP, web(volumeMounts=[{"mountPath": "/cache", "name": "cache", "readOnly": True}])),
    ("smp-volume-retain-keys", "$retainKeys on a volume drops the old volume source",
     deployment, SMP, tmpl({"volumes": [{"name": "cache", "emptyDir": {}, "$retainKeys": ["emptyDir", "name"]}]})),
    ("smp-volume-no-retain-keys", "without $retainKeys both volume sources stay (then validation fails)",
     deployment, SMP, tmpl({"volumes": [{"name": "cache", "emptyDir": {}}]})),
    ("smp-strategy-retain-keys", "$retainKeys on Deployment strategy (Recreate)",
     deployment, SMP, {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
    ("smp-retain-keys-mismatch", "a patch field missing from $retainKeys is an error",
     deployment, SMP, {"spec": {"strategy": {"$retainKeys": ["type"], "type": "RollingUpdate",
                                             "rollingUpdate": {"maxSurge": 2}}}}),
    ("smp-retain-keys-not-list", "$retainKeys must be a list",
     deployment, SMP, {"spec": {"strategy": {"$retainKeys": "type", "type": "Recreate"}}}),
    ("smp-finalizers-union", "finalizers (primitive list, merge) are a set union",
     deployment, SMP, {"metadata": {"finalizers": ["example.com/d", "example.com/a"]}}),
    ("smp-finalizers-delete", "$deleteFromPrimitiveList/finalizers",
     deployment, SMP, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/b", "example.com/x"]}}),
    ("smp-finalizers-order", "$setElementOrder/finalizers reorders a primitive list",
     deployment, SMP, {"metadata": {"$setElementOrder/finalizers": ["example.com/c", "example.com/a", "example.com/b"]}}),
    ("smp-finalizers-order-delete", "kubectl's removal: $setElementOrder and $deleteFromPrimitiveList",
     deployment, SMP, {"metadata": {"$setElementOrder/finalizers": ["example.com/a", "example.com/c"],
                                    "$deleteFromPrimitiveList/finalizers": ["example.com/b"]}}),
    ("smp-finalizers-null", "null deletes the whole list",
     deployment, SMP, {"metadata": {"finalizers": None}}),
    ("smp-args-atomic", "a list without patch strategy is replaced",
     deployment, SMP, tmpl({"containers": [{"name": "sidecar", "args": ["sleep", "1"]}]})),
    ("smp-tolerations-atomic", "tolerations (no merge key) are replaced",
     deployment, SMP, tmpl({"tolerations": [{"key": "b", "operator": "Exists"}]})),
    ("smp-node-selector", "nodeSelector merges key by key (map-type atomic does not matter to SMP)",
     deployment, SMP, tmpl({"nodeSelector": {"zone": "a"}})),
    ("smp-labels-null", "null deletes a map key; new keys are added",
     deployment, SMP, {"metadata": {"labels": {"team": None, "new": "x"}}}),
    ("smp-map-patch-replace", "$patch: replace in a map replaces it",
     deployment, SMP, {"spec": {"template": {"metadata": {"labels": {"$patch": "replace", "app": "web", "v": "2"}}}}}),
    ("smp-map-patch-delete", "$patch: delete in a map empties it",
     deployment, SMP, {"metadata": {"annotations": {"$patch": "delete"}}}),
    ("smp-map-patch-merge", "$patch: merge in a map",
     deployment, SMP, {"metadata": {"annotations": {"$patch": "merge", "more": "y"}}}),
    ("smp-map-patch-unknown", "an unknown $patch value in a map",
     deployment, SMP, {"metadata": {"annotations": {"$patch": "frobnicate"}}}),
    ("smp-list-patch-merge", "$patch: merge as a list element is refused",
     deployment, SMP, tmpl({"containers": [{"$patch": "merge"}]})),
    ("smp-list-patch-unknown", "an unknown $patch value as a list element",
     deployment, SMP, tmpl({"containers": [{"name": "web", "$patch": "frobnicate"}]})),
    ("smp-missing-merge-key", "a merge-list element without its merge key",
     deployment, SMP, tmpl({"containers": [{"image": "x"}]})),
    ("smp-new-subtree-nulls", "nulls inside a subtree the object lacks are dropped",
     deployment, SMP, tmpl({"securityContext": {"runAsUser": 1000, "runAsGroup": None}})),
    ("smp-new-list-with-directive", "a directive inside a list the object lacks",
     deployment, SMP, tmpl({"initContainers": [dict(container("init", "busybox:1.36"), **{"$patch": "delete"})]})),
    ("smp-empty", "an empty patch changes nothing",
     deployment, SMP, {}),
    ("smp-null-patch", "a strategic merge patch that is null",
     config_map, SMP, None),
    ("smp-delete-from-atomic-list", "$deleteFromPrimitiveList works on a list without merge strategy",
     deployment, SMP, tmpl({"containers": [{"name": "sidecar", "$deleteFromPrimitiveList/args": ["sleep"]}]})),
    ("smp-delete-from-list-null", "$deleteFromPrimitiveList with null removes the list",
     deployment, SMP, {"metadata": {"$deleteFromPrimitiveList/finalizers": None}}),
    ("smp-delete-from-missing-list", "$deleteFromPrimitiveList on a list the object lacks",
     service_account, SMP, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}}),
    ("smp-bad-delete-prefix", "a malformed $deleteFromPrimitiveList key",
     deployment, SMP, {"metadata": {"$deleteFromPrimitiveListfinalizers": ["x"]}}),
    ("smp-bad-order-prefix", "a malformed $setElementOrder key",
     deployment, SMP, {"metadata": {"$setElementOrderfinalizers": ["x"]}}),
    ("smp-order-not-list", "$setElementOrder that is not a list",
     deployment, SMP, {"metadata": {"$setElementOrder/finalizers": "x"}}),
    ("smp-order-new-list", "$setElementOrder with a list the object lacks",
     service_account, SMP, {"metadata": {"$setElementOrder/finalizers": ["b", "a"], "finalizers": ["a", "b"]}}),
    ("smp-order-atomic-list", "$setElementOrder on a list without merge strategy",
     deployment, SMP, tmpl({"containers": [{"name": "sidecar", "$setElementOrder/args": ["3600", "sleep"],
                                            "args": ["sleep", "3600"]}]})),
    ("smp-list-of-lists", "a list of lists in a merge list",
     deployment, SMP, {"metadata": {"finalizers": [["x"]]}}),
    ("smp-list-mixed-types", "list elements of different types",
     deployment, SMP, {"metadata": {"finalizers": [1]}}),
    ("smp-finalizers-duplicates", "duplicates in a primitive merge list",
     deployment, SMP, {"metadata": {"finalizers": ["example.com/x", "example.com/x", "example.com/a"]}}),
    ("smp-finalizers-new", "finalizers on an object without them",
     service_account, SMP, {"metadata": {"finalizers": ["example.com/x"]}}),
    ("smp-env-duplicate-keys", "two patch elements with the same merge key",
     deployment, SMP, web(env=[{"name": "X", "value": "1"}, {"name": "X", "value": "2"}])),
    ("smp-retain-keys-plain-map", "$retainKeys on a map whose field has no retainKeys strategy",
     deployment, SMP, {"metadata": {"labels": {"$retainKeys": ["app"], "app": "web2"}}}),
    ("smp-retain-keys-null-ok", "$retainKeys with a null for a dropped key",
     deployment, SMP, {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": None}}}),
    ("smp-replace-list-and-delete", "$patch: replace with a $patch: delete element",
     deployment, SMP, tmpl({"containers": [{"$patch": "replace"}, container("only", "redis:7"),
                                           {"name": "web", "$patch": "delete"}]})),
    ("smp-scalar-directive-map", "a map with $patch where the object has a scalar",
     deployment, SMP, {"spec": {"replicas": {"$patch": "delete"}}}),
    ("smp-new-map-patch-delete", "a new map holding only $patch: delete",
     deployment, SMP, tmpl({"securityContext": {"$patch": "delete"}})),
    ("smp-new-map-nested-directive", "a new map with a nested $patch: delete map",
     deployment, SMP, tmpl({"securityContext": {"runAsUser": 5, "seLinuxOptions": {"$patch": "delete", "user": "u"}}})),
    ("smp-patch-replace-with-nulls", "$patch: replace map with null members",
     deployment, SMP, {"metadata": {"labels": {"$patch": "replace", "app": "web", "gone": None}}}),
    ("smp-atomic-list-with-directive", "an atomic list element carrying $patch",
     deployment, SMP, tmpl({"tolerations": [{"key": "x", "operator": "Exists", "$patch": "delete"}]})),
    ("smp-merge-key-number-type", "a merge key given as a float",
     service, SMP, {"spec": {"ports": [{"port": 80.0, "targetPort": 9090}]}}),
    ("smp-set-order-with-delete", "$setElementOrder with a $patch: delete element",
     deployment, SMP, {"spec": {"template": {"spec": {
         "$setElementOrder/containers": [{"name": "web"}],
         "containers": [{"name": "sidecar", "$patch": "delete"}]}}}}),
    ("smp-set-order-server-only", "$setElementOrder leaving out an existing element",
     deployment, SMP, web(**{"$setElementOrder/env": [{"name": "C"}, {"name": "B"}], "env": [{"name": "B", "value": "b"}]})),
    ("smp-set-order-no-merge-key", "$setElementOrder element without the merge key",
     deployment, SMP, web(**{"$setElementOrder/env": [{"value": "x"}]})),
    ("smp-type-change", "a scalar where the object has a map replaces it (then decoding fails)",
     deployment, SMP, {"spec": {"strategy": "Recreate"}}),
    ("smp-service-ports", "Service ports merge by port",
     service, SMP, {"spec": {"ports": [{"port": 80, "targetPort": 9090}, {"name": "alt", "port": 8080, "protocol": "TCP", "targetPort": 8080}]}}),
    ("smp-service-port-delete", "$patch: delete of a Service port",
     service, SMP, {"spec": {"ports": [{"port": 443, "$patch": "delete"}]}}),
    ("smp-service-selector", "Service selector merges (map)",
     service, SMP, {"spec": {"selector": {"tier": "front"}}}),
    ("smp-sa-secrets", "ServiceAccount secrets and imagePullSecrets merge by name",
     service_account, SMP, {"secrets": [{"name": "s3"}], "imagePullSecrets": [{"name": "p1", "$patch": "delete"}]}),
    ("smp-sa-owner-references", "ownerReferences merge by uid",
     service_account, SMP, {"metadata": {"ownerReferences": [
         {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "11111111-2222-3333-4444-555555555555"}]}}),
    ("smp-configmap-data", "ConfigMap data merges; null deletes",
     config_map, SMP, {"data": {"a": None, "c": "3"}}),
    ("smp-configmap-data-replace", "$patch: replace on ConfigMap data",
     config_map, SMP, {"data": {"$patch": "replace", "z": "26"}}),
    ("smp-pdb-selector-replace", "PodDisruptionBudget spec.selector has patch strategy replace",
     pdb, SMP, {"spec": {"selector": {"matchLabels": {"app": "db"}}}}),
    ("smp-raw-extension", "a map under RawExtension has no schema: the lookup fails",
     controller_revision, SMP, {"data": {"spec": {"b": 2}}}),
    ("smp-custom-resource", "strategic merge patch on a custom resource",
     widget, SMP, {"spec": {"size": 4}}),
    ("smp-not-object", "a strategic merge patch that is a list",
     config_map, SMP, [{"a": 1}]),
    # --- JSON merge patch
    ("merge-containers-atomic", "merge patch replaces lists wholesale",
     deployment, MERGE, tmpl({"containers": [container("only", "redis:7")]})),
    ("merge-labels-null", "merge patch: null deletes a key",
     deployment, MERGE, {"metadata": {"labels": {"team": None, "new": "x"}}}),
    ("merge-configmap", "merge patch on ConfigMap data",
     config_map, MERGE, {"data": {"a": None, "c": "3"}, "metadata": {"annotations": {"x": "y"}}}),
    ("merge-cr-nested", "merge patch on a custom resource: nested maps and nulls",
     widget, MERGE, {"spec": {"nested": {"x": None, "y": {"w": 3}}, "extra": {"k": None, "v": 1}}}),
    ("merge-cr-array-nulls-over-array", "merge patch: an array with null members over an array",
     widget, MERGE, {"spec": {"items": [{"a": None, "c": 3}, None]}}),
    ("merge-cr-array-nulls-over-map", "merge patch: an array with null members over a map",
     widget, MERGE, {"spec": {"nested": [{"a": None, "c": 3}]}}),
    ("merge-cr-array-nulls-new", "merge patch: an array with null members where there was nothing",
     widget, MERGE, {"spec": {"fresh": [{"a": None, "c": 3}]}}),
    ("merge-cr-null-over-null", "merge patch: a map over a null",
     widget, MERGE, {"spec": {"size": {"a": None, "b": 1}}}),
    ("merge-not-object", "a merge patch that is a list",
     config_map, MERGE, [1, 2]),
    ("merge-scalar", "a merge patch that is a number",
     config_map, MERGE, 1),
    ("merge-null", "a merge patch that is null",
     config_map, MERGE, None),
    ("merge-empty", "an empty merge patch",
     config_map, MERGE, {}),
    ("merge-cr-scalar-over-map", "merge patch: a scalar over a map, a map over a scalar",
     widget, MERGE, {"spec": {"nested": 5, "size": {"deep": {"x": None, "y": 1}}}}),
    ("merge-cr-deep-new", "merge patch: nulls deep inside a new member",
     widget, MERGE, {"spec": {"fresh": {"a": {"b": None, "c": [None, {"d": None, "e": 1}]}}}}),
    # --- JSON patch (RFC 6902)
    ("json-replace-image", "replace by index path",
     deployment, JSONP, [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "nginx:1.26"}]),
    ("json-add-append", "add with - appends",
     deployment, JSONP, [{"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": {"name": "D", "value": "4"}}]),
    ("json-add-index", "add at an index inserts",
     deployment, JSONP, [{"op": "add", "path": "/spec/template/spec/containers/0/env/1", "value": {"name": "D", "value": "4"}}]),
    ("json-add-index-end", "add at index == length appends",
     deployment, JSONP, [{"op": "add", "path": "/metadata/finalizers/3", "value": "example.com/d"}]),
    ("json-add-index-past-end", "add past the end",
     deployment, JSONP, [{"op": "add", "path": "/metadata/finalizers/4", "value": "example.com/d"}]),
    ("json-add-negative-index", "add at a negative index",
     deployment, JSONP, [{"op": "add", "path": "/metadata/finalizers/-1", "value": "example.com/d"}]),
    ("json-add-leading-zero", "an index with a leading zero",
     deployment, JSONP, [{"op": "add", "path": "/metadata/finalizers/01", "value": "example.com/d"}]),
    ("json-add-missing-parent", "add under a missing parent",
     deployment, JSONP, [{"op": "add", "path": "/metadata/nothing/x", "value": "1"}]),
    ("json-add-escaped", "~1 in a path",
     deployment, JSONP, [{"op": "add", "path": "/metadata/annotations/example.com~1a", "value": "1"}]),
    ("json-cr-escaped", "~0 and ~01 in a path",
     widget, JSONP, [{"op": "add", "path": "/spec/a~0b", "value": 1}, {"op": "add", "path": "/spec/c~01d", "value": 2}]),
    ("json-test-html-chars", "test a string with <, > and & (the server's JSON escapes them)",
     config_map, JSONP, [{"op": "add", "path": "/data/h", "value": "a<b>&c"},
                         {"op": "test", "path": "/data/h", "value": "a<b>&c"}]),
    ("json-test-html-chars-stored", "test a stored string with <, > and &",
     config_map_html, JSONP, [{"op": "test", "path": "/data/h", "value": "a<b>&c"}]),
    ("json-test-number-float", "test 2 against 2.0",
     deployment, JSONP, [{"op": "test", "path": "/spec/replicas", "value": 2.0}]),
    ("json-test-root", "test the whole document",
     config_map, JSONP, [{"op": "test", "path": "", "value": {"a": 1}}]),
    ("json-replace-root", "replace the whole document",
     widget, JSONP, [{"op": "replace", "path": "", "value": {
         "apiVersion": "golden.flotilla.io/v1", "kind": "Widget",
         "metadata": {"name": "json-replace-root"}, "spec": {"new": True}}}]),
    ("json-move-into-child", "move a member into itself",
     widget, JSONP, [{"op": "move", "from": "/spec/nested", "path": "/spec/nested/y/inner"}]),
    ("json-move-array", "move a list element",
     widget, JSONP, [{"op": "move", "from": "/spec/items/0", "path": "/spec/items/-"}]),
    ("json-copy-into-array-index", "copy to an index",
     widget, JSONP, [{"op": "copy", "from": "/spec/nested", "path": "/spec/items/0"}]),
    ("json-test-missing-no-value", "test without a value on a missing path",
     config_map, JSONP, [{"op": "test", "path": "/metadata/finalizers"}]),
    ("json-test-present-no-value", "test without a value on a present path",
     config_map, JSONP, [{"op": "test", "path": "/data/a"}]),
    ("json-op-path-number", "a path that is a number",
     config_map, JSONP, [{"op": "add", "path": 1, "value": "1"}]),
    ("json-op-op-number", "an op that is a number",
     config_map, JSONP, [{"op": 1, "path": "/data/c", "value": "1"}]),
    ("json-op-missing", "an operation without op",
     config_map, JSONP, [{"path": "/data/c", "value": "1"}]),
    ("json-remove-through-missing", "remove below a missing member",
     config_map, JSONP, [{"op": "remove", "path": "/metadata/nothing/x"}]),
    ("json-replace-missing-parent", "replace below a missing member",
     config_map, JSONP, [{"op": "replace", "path": "/metadata/nothing/x", "value": "1"}]),
    ("json-replace-array-dash", "replace of -",
     deployment, JSONP, [{"op": "replace", "path": "/metadata/finalizers/-", "value": "x"}]),
    ("json-add-bad-index", "add at a non-numeric index",
     deployment, JSONP, [{"op": "add", "path": "/metadata/finalizers/x", "value": "x"}]),
    ("json-remove-negative", "remove at a negative index",
     deployment, JSONP, [{"op": "remove", "path": "/metadata/finalizers/-1"}]),
    ("json-replace-negative", "replace at a negative index",
     deployment, JSONP, [{"op": "replace", "path": "/metadata/finalizers/-3", "value": "example.com/z"}]),
    ("json-add-negative-too-far", "add at a negative index before the start",
     deployment, JSONP, [{"op": "add", "path": "/metadata/finalizers/-5", "value": "example.com/z"}]),
    ("json-test-through-null", "a path through a null",
     widget_null, JSONP, [{"op": "add", "path": "/spec/gone/x", "value": 1}]),
    ("json-null-patch", "a JSON patch that is null",
     config_map, JSONP, None),
    ("json-copy-missing-parent", "copy from below a missing member",
     config_map, JSONP, [{"op": "copy", "from": "/metadata/nothing/x", "path": "/data/x"}]),
    ("json-move-no-from", "move without from",
     config_map, JSONP, [{"op": "move", "path": "/data/x"}]),
    ("json-copy-no-from", "copy without from",
     config_map, JSONP, [{"op": "copy", "path": "/data/x"}]),
    ("json-remove-no-path", "remove without path",
     config_map, JSONP, [{"op": "remove"}]),
    ("json-replace-no-path", "replace without path",
     config_map, JSONP, [{"op": "replace", "value": 1}]),
    ("json-test-no-path", "test without path",
     config_map, JSONP, [{"op": "test", "value": 1}]),
    ("json-move-no-path", "move without path",
     config_map, JSONP, [{"op": "move", "from": "/data/a"}]),
    ("json-copy-no-path", "copy without path",
     config_map, JSONP, [{"op": "copy", "from": "/data/a"}]),
    ("json-remove-index", "remove by index",
     deployment, JSONP, [{"op": "remove", "path": "/metadata/finalizers/1"}]),
    ("json-remove-missing", "remove of a missing key",
     deployment, JSONP, [{"op": "remove", "path": "/metadata/labels/nope"}]),
    ("json-remove-dash", "remove of -",
     deployment, JSONP, [{"op": "remove", "path": "/metadata/finalizers/-"}]),
    ("json-remove-out-of-range", "remove past the end",
     deployment, JSONP, [{"op": "remove", "path": "/metadata/finalizers/9"}]),
    ("json-replace-missing-key", "replace of a missing object member",
     deployment, JSONP, [{"op": "replace", "path": "/metadata/labels/nope", "value": "1"}]),
    ("json-replace-out-of-range", "replace past the end of a list",
     deployment, JSONP, [{"op": "replace", "path": "/metadata/finalizers/9", "value": "x"}]),
    ("json-move", "move a label to an annotation",
     deployment, JSONP, [{"op": "move", "from": "/metadata/labels/team", "path": "/metadata/annotations/team"}]),
    ("json-move-missing", "move from a missing member",
     deployment, JSONP, [{"op": "move", "from": "/metadata/labels/nope", "path": "/metadata/annotations/x"}]),
    ("json-copy", "copy a list element",
     deployment, JSONP, [{"op": "copy", "from": "/metadata/finalizers/0", "path": "/metadata/finalizers/-"}]),
    ("json-copy-missing", "copy from a missing member",
     deployment, JSONP, [{"op": "copy", "from": "/metadata/labels/nope", "path": "/metadata/annotations/x"}]),
    ("json-test-ok", "test then replace",
     deployment, JSONP, [{"op": "test", "path": "/spec/replicas", "value": 2},
                         {"op": "replace", "path": "/spec/replicas", "value": 3}]),
    ("json-test-object", "test compares objects",
     deployment, JSONP, [{"op": "test", "path": "/spec/selector", "value": {"matchLabels": {"app": "web"}}},
                         {"op": "replace", "path": "/spec/replicas", "value": 3}]),
    ("json-test-fails", "a failing test",
     deployment, JSONP, [{"op": "test", "path": "/spec/replicas", "value": 5},
                         {"op": "replace", "path": "/spec/replicas", "value": 3}]),
    ("json-test-null-missing", "kube-rs finalizer: test null on a missing path succeeds",
     service_account, JSONP, [{"op": "test", "path": "/metadata/finalizers", "value": None},
                              {"op": "add", "path": "/metadata/finalizers", "value": ["example.com/x"]}]),
    ("json-test-null-present", "test null on a present value fails",
     deployment, JSONP, [{"op": "test", "path": "/metadata/finalizers", "value": None},
                         {"op": "add", "path": "/metadata/finalizers", "value": ["example.com/x"]}]),
    ("json-test-finalizers-remove", "kube-rs finalizer removal: test the element, remove it",
     deployment, JSONP, [{"op": "test", "path": "/metadata/finalizers/1", "value": "example.com/b"},
                         {"op": "remove", "path": "/metadata/finalizers/1"}]),
    ("json-test-missing-value", "test with a non-null value on a missing path",
     deployment, JSONP, [{"op": "test", "path": "/metadata/labels/nope", "value": "x"}]),
    ("json-unknown-op", "an unknown op",
     deployment, JSONP, [{"op": "frobnicate", "path": "/metadata/labels/x", "value": "1"}]),
    ("json-missing-path", "an op without a path",
     deployment, JSONP, [{"op": "add", "value": "1"}]),
    ("json-root-path", "add at the empty path",
     config_map, JSONP, [{"op": "add", "path": "", "value": {"x": 1}}]),
    ("json-no-leading-slash", "a path without a leading slash",
     config_map, JSONP, [{"op": "add", "path": "data/c", "value": "3"}]),
    ("json-through-scalar", "a path through a scalar",
     config_map, JSONP, [{"op": "add", "path": "/data/a/b", "value": "3"}]),
    ("json-empty", "an empty JSON patch",
     config_map, JSONP, []),
    ("json-not-list", "a JSON patch that is an object",
     config_map, JSONP, {"op": "add", "path": "/data/c", "value": "3"}),
    ("json-op-not-object", "a JSON patch element that is not an object",
     config_map, JSONP, [1]),
    ("json-add-no-value", "add without a value",
     config_map, JSONP, [{"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}},
                         {"op": "add", "path": "/metadata/annotations/k2"}]),
    ("json-cr-add", "JSON patch on a custom resource",
     widget, JSONP, [{"op": "add", "path": "/spec/items/1", "value": {"n": None}},
                     {"op": "remove", "path": "/spec/nested/y"}]),
]

# Cases whose body is not JSON, sent as raw text.
TEXT_CASES = [
    ("json-invalid", "a JSON patch that is not JSON", config_map, JSONP, "[{\"op\": "),
    ("smp-invalid", "a strategic merge patch that is not JSON", config_map, SMP, "{\"data\": "),
    ("merge-invalid", "a merge patch that is not JSON", config_map, MERGE, "{\"data\": "),
]

# A JSON patch over the operation limit: this op repeated.
REPEAT_CASES = [
    ("json-too-many-ops", "more than 10000 operations", config_map, JSONP,
     {"op": "test", "path": "/data/a", "value": "1"}, 10001),
    ("json-max-ops", "exactly 10000 operations", config_map, JSONP,
     {"op": "test", "path": "/data/a", "value": "1"}, 10000),
]

# ---------------------------------------------------------------------------------------------
# Selector cases

SELECTOR_OBJECTS = {
    "cm-a": {"app": "web", "tier": "front", "env": "prod", "n": "5"},
    "cm-b": {"app": "db", "tier": "back", "n": "10"},
    "cm-c": {"app": "web", "env": "", "n": "x"},
    "cm-d": {},
    "cm-e": {"example.com/team": "blue", "app": "in"},
    "cm-f": {"n": "007", "tier": "front", "A.b-c_d": "V"},
}

LABEL_SELECTORS = [
    "", " ", "app", "!app", "app=web", "app==web", "app!=web", "app = web", " app=web , tier=front ",
    "app in (web,db)", "app in (web, db)", "app notin (web)", "app in ()", "env in ()", "env=", "env==",
    "env!=", "env in (,prod)", "env in (prod,)", "env in (prod,,x)", "env notin ()", "n>6", "n<6",
    "n>006", "n<0", "n>-1", "n>x", "n>x.", "n>", "n<1.5", "example.com/team=blue",
    "example.com/team", "!example.com/team", "app=in", "app in (in,notin)", "in", "notin",
    "in in (in)", "A.b-c_d=V", "app,app", "app=web,app=db", "app=web,!tier", "!tier,app=web",
    "a b", "a=b c", "A/b", "/b", "a/", "x=a b", "a in (b c)", "!a=b", "a,", ",a", "a=(", "a notin",
    "a in b", "a<>1", "a=b=c", "a in (,)", "a.b/c/d", "a!b", "a=b,,c", "!", "!!a", "a==b==c",
    "a=-x", "a in (-b)", "a=" + "v" * 64, "a" * 64, "b" * 254 + "/a", "a" * 63 + "=" + "v" * 63,
    "x" * 253 + "/" + "y" * 63, "a\tin\t(b)", "a\nin (b)", "a in(b)", "a in (b)x", "a)", "(a)",
    "a in ((b))", "a in (b", "a in (b,", "a==", "a!==b", "a=!b", "a>=1", "a<=1", "a>>1",
    "Ä=b", "a=ä", "a\"b", "a=b\"", "app=web,", "app=web;tier=front", "-a", "a-", "a_b", "_a",
    "a.b", "a..b", "EXAMPLE.com/a", "example.com/A", "exa_mple.com/a", "1.2.3.4/a", "a=1.5",
    "app notin (db,web),n<100", "n>4,n<11", "n>5", "n>4",
]

FIELD_SELECTORS = [
    "", "metadata.name=cm-a", "metadata.name==cm-a", "metadata.name!=cm-a", "metadata.name=",
    "metadata.name!=", "metadata.namespace=selectors", "metadata.namespace!=selectors",
    "metadata.name=cm-a,metadata.name=cm-b", "metadata.name!=cm-a,metadata.name!=cm-b",
    "metadata.name=cm-a,,", ",metadata.name=cm-b", "metadata.name=cm\\-a", "metadata.name=a\\,b",
    "metadata.name=a\\=b", "metadata.name=a\\\\b", "metadata.name=a\\", "metadata.name=a=b",
    "metadata.name=a,b", "metadata.name", "metadata.name = cm-a", "=x", "spec.foo=1", "a b=c",
    "metadata.name=!cm-a", "metadata.name!=!", "x,y", "b=1,a",
]


# ---------------------------------------------------------------------------------------------
# HTTP


class Client:
    def __init__(self, kubeconfig):
        cfg = json.loads(subprocess.run(
            ["kubectl", "--kubeconfig", kubeconfig, "config", "view", "--raw", "-o", "json"],
            check=True, capture_output=True, text=True).stdout)
        cluster = cfg["clusters"][0]["cluster"]
        user = cfg["users"][0]["user"]
        self.tmp = tempfile.mkdtemp(prefix="flotilla-golden-")
        files = {}
        for name, key in (("ca", "certificate-authority-data"), ("crt", "client-certificate-data"),
                          ("key", "client-key-data")):
            path = os.path.join(self.tmp, name)
            with open(path, "wb") as f:
                f.write(base64.b64decode(cluster.get(key) or user.get(key)))
            files[name] = path
        self.ctx = ssl.create_default_context(cafile=files["ca"])
        self.ctx.load_cert_chain(files["crt"], files["key"])
        u = urllib.parse.urlparse(cluster["server"])
        self.host, self.port = u.hostname, u.port

    def request(self, method, path, body=None, content_type="application/json"):
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=30)
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read().decode()
        conn.close()
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return resp.status, raw


def must(status_body, ok=(200, 201)):
    status, body = status_body
    if status not in ok:
        raise SystemExit(f"unexpected {status}: {body}")
    return body


# ---------------------------------------------------------------------------------------------
# Recording


def scrub(value, replacements):
    """Drop managedFields and resourceVersion; replace volatile strings by placeholders."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in ("managedFields", "resourceVersion"):
                continue
            out[k] = scrub(v, replacements)
        return out
    if isinstance(value, list):
        return [scrub(v, replacements) for v in value]
    if isinstance(value, str) and value in replacements:
        return replacements[value]
    return value


def volatile(obj, ns):
    r = {ns: "golden"}
    meta = obj.get("metadata", {})
    if "uid" in meta:
        r[meta["uid"]] = "00000000-0000-0000-0000-000000000001"
    if "creationTimestamp" in meta:
        r[meta["creationTimestamp"]] = "2026-01-01T00:00:00Z"
    spec = obj.get("spec", {}) if isinstance(obj.get("spec"), dict) else {}
    for i, ip in enumerate(spec.get("clusterIPs", []) or []):
        r[ip] = f"10.96.0.{10 + i}"
    return r


def status_summary(body):
    if isinstance(body, dict) and body.get("kind") == "Status":
        out = {"reason": body.get("reason", ""), "message": body.get("message", "")}
        if body.get("details"):
            out["details"] = body["details"]
        return out
    return {"message": body if isinstance(body, str) else json.dumps(body)}


def record_patches(client, out_dir, ns):
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        if f.endswith(".json"):
            os.remove(os.path.join(out_dir, f))
    all_cases = [(n, d, b, ct, p, "json", 1) for (n, d, b, ct, p) in CASES]
    all_cases += [(n, d, b, ct, p, "text", 1) for (n, d, b, ct, p) in TEXT_CASES]
    all_cases += [(n, d, b, ct, p, "repeat", r) for (n, d, b, ct, p, r) in REPEAT_CASES]
    for name, description, build, content_type, patch, form, repeat in all_cases:
        obj = build(name)
        prefix, resource = RESOURCES[obj["kind"]]
        base = f"/{prefix}/namespaces/{ns}/{resource}"
        created = must(client.request("POST", base, obj))
        if form == "repeat":
            body = [patch] * repeat
        else:
            body = patch
        text = patch if form == "text" else json.dumps(body)
        status, answer = client.request("PATCH", f"{base}/{name}?dryRun=All", text, content_type)
        repl = volatile(created, ns)
        case = {
            "name": name,
            "description": description,
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "contentType": content_type,
            "object": scrub(created, repl),
        }
        if form == "text":
            case["patchText"] = patch
        elif form == "repeat":
            case["patch"] = [patch]
            case["patchRepeat"] = repeat
        else:
            case["patch"] = patch
        case["response"] = {"code": status}
        if 200 <= status < 300:
            case["response"]["object"] = scrub(answer, repl)
        else:
            case["response"].update(status_summary(answer))
        with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
            json.dump(case, f, indent=1, sort_keys=False, ensure_ascii=False)
            f.write("\n")
        print(f"  {name}: {status}", file=sys.stderr)


def record_selectors(client, out_path, ns):
    base = f"/api/v1/namespaces/{ns}/configmaps"
    for name, labels in SELECTOR_OBJECTS.items():
        must(client.request("POST", base, {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}}))

    def run(param, selector):
        # Selectors name the namespace "selectors"; the real one has a random suffix.
        q = urllib.parse.urlencode({param: selector.replace("selectors", ns)})
        status, body = client.request("GET", f"{base}?{q}")
        if status == 200:
            return {"selector": selector, "code": 200,
                    "names": sorted(i["metadata"]["name"] for i in body["items"])}
        return {"selector": selector, "code": status, **status_summary(body)}

    out = {
        "description": "labelSelector/fieldSelector on configmaps in one namespace, as "
                       "kube-apiserver answered (scripts/regen-api-golden.sh)",
        "namespace": "selectors",
        "objects": [{"name": n, "labels": l} for n, l in SELECTOR_OBJECTS.items()],
        "labelSelectors": [run("labelSelector", s) for s in LABEL_SELECTORS],
        "fieldSelectors": [run("fieldSelector", s) for s in FIELD_SELECTORS],
    }
    text = json.dumps(out, indent=1, ensure_ascii=False).replace(ns, "selectors")
    with open(out_path, "w") as f:
        f.write(text + "\n")


def main():
    kubeconfig, data_dir = sys.argv[1], sys.argv[2]
    client = Client(kubeconfig)
    run = uuid.uuid4().hex[:6]
    ns = f"golden-{run}"
    sel_ns = f"selectors-{run}"
    for n in (ns, sel_ns):
        must(client.request("POST", "/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}))
    status, _ = client.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
    if status not in (201, 409):
        raise SystemExit(f"CRD create: {status}")
    for _ in range(100):
        s, body = client.request("GET", "/apis/golden.flotilla.io/v1")
        if s == 200:
            break
        time.sleep(0.1)
    time.sleep(1)
    print("patches:", file=sys.stderr)
    record_patches(client, os.path.join(data_dir, "patch-golden"), ns)
    print("selectors:", file=sys.stderr)
    record_selectors(client, os.path.join(data_dir, "selector-golden.json"), sel_ns)


if __name__ == "__main__":
    main()
