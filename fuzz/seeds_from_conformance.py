"""Seed inputs for the api_request fuzz target from the API behaviour cases.

    python3 fuzz/seeds_from_conformance.py conformance/cases OUT_DIR

Each request step of conformance/cases/*.yaml becomes one input in the target's format (a
method byte, a content-type byte, the path and query, a newline, the body), with {{ns}} as
"default"; steps that need a captured value are skipped. The committed conformance-* inputs of
fuzz/corpus/api_request/ are those that added coverage (libFuzzer's -merge=1 of OUT_DIR into
the corpus); rerun when the cases grow.
"""
import yaml, json, glob, hashlib, os, sys, urllib.parse
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
TYPES = ["application/json","application/json-patch+json","application/merge-patch+json",
 "application/strategic-merge-patch+json","application/apply-patch+yaml","application/yaml",
 "application/vnd.kubernetes.protobuf","text/plain"]
out = sys.argv[2]; n = 0
os.makedirs(out, exist_ok=True)
for f in sorted(glob.glob(sys.argv[1] + "/*.yaml")):
    doc = yaml.safe_load(open(f))
    for case in doc.get("cases", []):
        for s in case.get("steps", []):
            if not isinstance(s, dict) or "path" not in s: continue
            m = s.get("method", "GET")
            if m not in METHODS: continue
            ct = ((s.get("headers") or {}).get("content-type") or "application/json").split(";")[0]
            ti = TYPES.index(ct) if ct in TYPES else 0
            path = s["path"].replace("{{ns}}", "default")
            q = s.get("query")
            if q:
                path += "?" + urllib.parse.urlencode({k: str(v).replace("{{ns}}", "default") for k, v in q.items()})
            if "{{" in path: continue
            body = s.get("body")
            b = b"" if body is None else (body if isinstance(body, str) else json.dumps(body)).encode()
            if b"{{" in b: continue
            data = bytes([METHODS.index(m), ti]) + path.encode() + b"\n" + b
            name = hashlib.sha1(data).hexdigest()
            open(os.path.join(out, name), "wb").write(data); n += 1
print(n)
