#!/usr/bin/env python3
"""Writes fuzz/corpus/<target>/ seeds from the recorded golden cases (run from the repo root).

Selectors come from tests/data/selector-golden.json; JSON, merge and strategic merge patch
seeds are the recorded (object, patch) pairs, as the targets read them: `[object, patch]`,
for strategic merge patch after one byte naming the kind (its index in the target's KINDS).
"""
import json
import os
import re
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "crates/flotilla-api/tests/data")
CORPUS = os.path.join(ROOT, "fuzz/corpus")
SMP_TARGET = os.path.join(ROOT, "fuzz/fuzz_targets/strategic_merge_patch.rs")


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    for target in ("label_selector", "field_selector", "json_patch", "merge_patch", "strategic_merge_patch"):
        shutil.rmtree(os.path.join(CORPUS, target), ignore_errors=True)
    with open(os.path.join(DATA, "selector-golden.json")) as f:
        sel = json.load(f)
    for i, c in enumerate(sel["labelSelectors"]):
        write("label_selector", f"golden-{i:03}", c["selector"])
    for i, c in enumerate(sel["fieldSelectors"]):
        write("field_selector", f"golden-{i:03}", c["selector"])
    kinds = re.findall(r'\("([^"]+)", "([^"]+)"\)', open(SMP_TARGET).read())
    golden = os.path.join(DATA, "patch-golden")
    for name in sorted(os.listdir(golden)):
        with open(os.path.join(golden, name)) as f:
            case = json.load(f)
        if "patch" not in case or "patchRepeat" in case:
            continue
        pair = json.dumps([case["object"], case["patch"]], separators=(",", ":"))
        ct = case["contentType"]
        stem = name[:-len(".json")]
        if ct == "application/json-patch+json":
            write("json_patch", stem, pair)
        elif ct == "application/merge-patch+json":
            write("merge_patch", stem, pair)
        elif (case["apiVersion"], case["kind"]) in kinds:
            write("strategic_merge_patch", stem, bytes([kinds.index((case["apiVersion"], case["kind"]))]) + pair.encode())
    for target in sorted(os.listdir(CORPUS)):
        d = os.path.join(CORPUS, target)
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        print(f"{target}: {len(os.listdir(d))} seeds, {size} bytes")


if __name__ == "__main__":
    main()
