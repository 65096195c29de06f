#!/usr/bin/env python3
"""Extract patch metadata from a kube-apiserver's /openapi/v2 into a compact JSON file.

Usage: regen-patch-meta.py OPENAPI_V2_JSON OUT_JSON [VERSION_JSON] [PATCHABLE_JSON]
       regen-patch-meta.py --patchable KUBECONFIG PATCHABLE_JSON

Kept per definition reachable from a patchable built-in kind:
  properties: scalars as their type name ("string", "integer", "number", "boolean"); a bare
  reference as "#<definition>"; anything else as an object with
    ref, type, items, values (additionalProperties),
    patchStrategy, patchMergeKey              (x-kubernetes-patch-*: strategic merge patch)
    listType, listMapKeys, mapType            (x-kubernetes-list-*/map-type: server-side apply)
  definition level: properties, gvk (x-kubernetes-group-version-kind), mapType, and for
  definitions without properties their type/format (Time, Quantity, IntOrString, RawExtension).
Descriptions, enums, required lists and unions are dropped.

Kinds: with PATCHABLE_JSON (a list of [group, version, kind] that discovery lists with the patch
verb, main resources and subresources such as autoscaling/v1 Scale, written by --patchable), only
those; otherwise every definition with a GVK except lists and the meta/v1 envelope kinds.
"""
import json
import subprocess
import sys

SCALARS = {"string", "integer", "number", "boolean"}
REF = "#/definitions/"


def prop(schema):
    """Compact form of one property (or items/additionalProperties) schema."""
    out = {}
    if "$ref" in schema:
        out["ref"] = schema["$ref"][len(REF):]
    t = schema.get("type")
    if t is not None and "$ref" not in schema:
        out["type"] = t
    if "items" in schema:
        out["items"] = prop(schema["items"])
    ap = schema.get("additionalProperties")
    if isinstance(ap, dict):
        out["values"] = prop(ap)
    for ext, key in (
        ("x-kubernetes-patch-strategy", "patchStrategy"),
        ("x-kubernetes-patch-merge-key", "patchMergeKey"),
        ("x-kubernetes-list-type", "listType"),
        ("x-kubernetes-list-map-keys", "listMapKeys"),
        ("x-kubernetes-map-type", "mapType"),
    ):
        if ext in schema:
            out[key] = schema[ext]
    if list(out) == ["type"] and out["type"] in SCALARS:
        return out["type"]
    if list(out) == ["ref"]:
        return "#" + out["ref"]
    if not out:
        return {}
    return out


def refs(p):
    if isinstance(p, str):
        if p.startswith("#"):
            yield p[1:]
        return
    if "ref" in p:
        yield p["ref"]
    for k in ("items", "values"):
        if k in p:
            yield from refs(p[k])


def definition(schema):
    out = {}
    if "properties" in schema:
        out["properties"] = {k: prop(v) for k, v in sorted(schema["properties"].items())}
        if schema.get("type", "object") != "object":
            out["type"] = schema["type"]
    else:
        for k in ("type", "format"):
            if k in schema:
                out[k] = schema[k]
    if "x-kubernetes-map-type" in schema:
        out["mapType"] = schema["x-kubernetes-map-type"]
    if "x-kubernetes-group-version-kind" in schema:
        out["gvk"] = [
            [g.get("group", ""), g["version"], g["kind"]]
            for g in schema["x-kubernetes-group-version-kind"]
        ]
    return out


def gv_key(group, version, kind):
    return (f"{group}/{version}" if group else version) + "/" + kind


def get_raw(kubeconfig, path):
    out = subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, "get", "--raw", path],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def patchable_kinds(kubeconfig):
    """[group, version, kind] of every resource or subresource discovery lists with 'patch'."""
    versions = [("", v) for v in get_raw(kubeconfig, "/api")["versions"]]
    for g in get_raw(kubeconfig, "/apis")["groups"]:
        versions += [(g["name"], v["version"]) for v in g["versions"]]
    found = set()
    for group, version in versions:
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        for r in get_raw(kubeconfig, path)["resources"]:
            if "patch" in r.get("verbs", []):
                found.add((r.get("group") or group, r.get("version") or version, r["kind"]))
    return sorted(found)


def main():
    if sys.argv[1] == "--patchable":
        with open(sys.argv[3], "w") as f:
            json.dump(patchable_kinds(sys.argv[2]), f)
        return
    openapi_path, out_path = sys.argv[1], sys.argv[2]
    version = None
    if len(sys.argv) > 3 and sys.argv[3]:
        try:
            with open(sys.argv[3]) as f:
                version = json.load(f)["serverVersion"]["gitVersion"]
        except (OSError, ValueError, KeyError):
            version = None
    patchable = None
    if len(sys.argv) > 4 and sys.argv[4]:
        with open(sys.argv[4]) as f:
            patchable = {gv_key(*k) for k in json.load(f)}

    with open(openapi_path) as f:
        doc = json.load(f)
    defs = doc["definitions"]

    kinds = {}
    for name, schema in sorted(defs.items()):
        gvks = schema.get("x-kubernetes-group-version-kind", [])
        for g in gvks:
            key = gv_key(g.get("group", ""), g["version"], g["kind"])
            if patchable is not None:
                if key not in patchable:
                    continue
            elif len(gvks) > 1 or g["kind"].endswith("List"):
                continue
            kinds[key] = name

    keep = {}
    todo = sorted(set(kinds.values()))
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        d = definition(defs[name])
        keep[name] = d
        for p in d.get("properties", {}).values():
            todo.extend(r for r in refs(p) if r not in keep)

    out = {
        "source": {
            "document": "/openapi/v2",
            "kubernetesVersion": version or doc.get("info", {}).get("version"),
            "generator": "scripts/regen-patch-meta.sh",
        },
        "kinds": dict(sorted(kinds.items())),
        "definitions": dict(sorted(keep.items())),
    }
    with open(out_path, "w") as f:
        # One definition per line: small, and diffs stay readable.
        f.write("{\n")
        f.write(' "source": ' + json.dumps(out["source"], sort_keys=True) + ",\n")
        f.write(' "kinds": {\n')
        f.write(",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in out["kinds"].items()))
        f.write("\n },\n")
        f.write(' "definitions": {\n')
        f.write(",\n".join(
            f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}"
            for k, v in out["definitions"].items()))
        f.write("\n }\n}\n")
    print(f"{out_path}: {len(kinds)} kinds, {len(keep)} definitions", file=sys.stderr)


if __name__ == "__main__":
    main()
