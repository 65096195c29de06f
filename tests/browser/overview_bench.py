"""The dashboard's overview at fleet size (issue 27): `flotilla up --demo N` with M Deployments
propagated by one PropagationPolicy, then headless Chromium opens the overview several times.

Reported, never asserted (a benchmark, not a test):
- how long the overview takes to render complete — every collection listed and drawn — from
  the page's start (`performance.now()`, so the scripts' load and the login check count) and
  from its navigation (the lists and the first render only);
- beside it the physical floor in the same browser and run: the same nine lists fetched in
  parallel and parsed, with no rendering;
- the collections (watches) the page holds open, and the JS heap.

It fails only when something is wrong: a member not joined, a workload not scheduled, the page
not complete within its deadline, or a count on screen that disagrees with the API.

    python tests/browser/overview_bench.py --members 100 --workloads 1000 [--runs 5]
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import ADMIN_TOKEN, new_driver, start_control_plane, stop  # noqa: E402

LISTS = [
    "/apis/cluster.karmada.io/v1alpha1/clusters",
    "/apis/work.karmada.io/v1alpha2/resourcebindings",
    "/apis/work.karmada.io/v1alpha2/clusterresourcebindings",
    "/apis/policy.karmada.io/v1alpha1/propagationpolicies",
    "/apis/policy.karmada.io/v1alpha1/clusterpropagationpolicies",
    "/apis/policy.karmada.io/v1alpha1/overridepolicies",
    "/apis/policy.karmada.io/v1alpha1/clusteroverridepolicies",
    "/apis/edge.flotilla.io/v1alpha1/edgereports",
    "/apis/coordination.k8s.io/v1/namespaces/karmada-cluster/leases",
]


def workloads(n):
    items = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}},
             {"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
              "metadata": {"name": "bench", "namespace": "bench"},
              "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                       "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided",
                                                           "replicaDivisionPreference": "Weighted"}}}}]
    for i in range(n):
        labels = {"app": f"web-{i}"}
        items.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"web-{i}", "namespace": "bench", "labels": labels},
                      "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                               "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}})
    return {"apiVersion": "v1", "kind": "List", "items": items}


def wait_for(what, deadline, f):
    last = None
    while time.time() < deadline:
        last = f()
        if last is True:
            return
        time.sleep(1)
    raise SystemExit(f"overview-bench: timed out waiting for {what} (last: {last})")


def bindings_with(cp, condition, want):
    out = cp.kubectl("get", "resourcebindings", "-n", "bench", "-o",
                     f"jsonpath={{range .items[*]}}{{.status.conditions[?(@.type==\"{condition}\")].status}}{{\"\\n\"}}{{end}}", check=False)
    n = out.stdout.split().count("True")
    return True if n >= want else f"{n}/{want} {condition}"


RAW = """
const done = arguments[arguments.length - 1];
const token = arguments[0];
const t0 = performance.now();
Promise.all(arguments[1].map((p) => fetch(p, { headers: { Authorization: 'Bearer ' + token } }).then((r) => r.json())))
  .then((lists) => done({ ms: performance.now() - t0, items: lists.reduce((n, l) => n + (l.items || []).length, 0) }))
  .catch((e) => done({ error: String(e) }));
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", type=int, default=100)
    ap.add_argument("--workloads", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--settle", type=int, default=10, help="seconds to wait after the workloads are applied")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    started = time.time()
    print(f"overview-bench: starting flotilla up --demo {args.members}", flush=True)
    cp, root = start_control_plane(args.members)
    driver = None
    try:
        print(f"overview-bench: {args.members} members joined in {time.time() - started:.0f}s; creating {args.workloads} Deployments", flush=True)
        t = time.time()
        cp.kubectl("create", "-f", "-", stdin=json.dumps(workloads(args.workloads)))
        wait_for("every workload scheduled", time.time() + 1800, lambda: bindings_with(cp, "Scheduled", args.workloads))
        print(f"overview-bench: {args.workloads} workloads scheduled in {time.time() - t:.0f}s", flush=True)
        wait_for("every workload applied in its member", time.time() + 1800, lambda: bindings_with(cp, "FullyApplied", args.workloads))
        print(f"overview-bench: {args.workloads} workloads applied in {time.time() - t:.0f}s; settling {args.settle}s", flush=True)
        time.sleep(args.settle)
        driver = new_driver(["--js-flags=--expose-gc"])
        driver.set_script_timeout(120)
        driver.get(cp.dashboard)
        driver.execute_script("sessionStorage.setItem('flotilla.dashboard.token', arguments[0])", ADMIN_TOKEN)
        runs = []
        for i in range(args.runs):
            driver.get(cp.dashboard + f"?run={i}#/")
            deadline = time.time() + 300
            while time.time() < deadline and not driver.execute_script("return !!(window.flotilla && window.flotilla.ready)"):
                time.sleep(0.05)
            probe = driver.execute_script(
                "if (window.gc) window.gc();"
                "return {nav: window.flotilla.timings.overview, page: window.flotilla.readyAt.overview, watches: window.flotilla.openWatches(),"
                " heap: performance.memory ? performance.memory.usedJSHeapSize : null,"
                " clusters: document.querySelectorAll('tr[data-cluster]').length, bindings: document.querySelector('[data-tile=templates] .value').textContent}")
            if probe["nav"] is None:
                raise SystemExit("overview-bench: the overview never completed")
            if probe["clusters"] != args.members or int(probe["bindings"]) != args.workloads:
                raise SystemExit(f"overview-bench: the page shows {probe['clusters']} clusters and {probe['bindings']} templates, want {args.members} and {args.workloads}")
            raw = driver.execute_async_script(RAW, ADMIN_TOKEN, LISTS)
            if "error" in raw:
                raise SystemExit(f"overview-bench: the raw lists failed: {raw['error']}")
            probe["raw"] = raw["ms"]
            probe["items"] = raw["items"]
            runs.append(probe)
            print(f"  run {i + 1}: complete {probe['page']:.0f} ms after the page started ({probe['nav']} ms after navigation); "
                  f"raw lists {raw['ms']:.0f} ms; {probe['watches']} watches open; heap {probe['heap'] / 2**20 if probe['heap'] else 0:.1f} MiB", flush=True)
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        if errors:
            raise SystemExit(f"overview-bench: console errors: {errors}")
        med = lambda k: statistics.median(r[k] for r in runs)  # noqa: E731
        figures = {
            "members": args.members, "workloads": args.workloads, "runs": args.runs, "objects_listed": runs[-1]["items"],
            "overview_complete_ms_from_page_start": round(med("page")), "overview_complete_ms_from_navigation": round(med("nav")),
            "raw_lists_ms": round(med("raw")), "ratio_to_raw_lists": round(med("nav") / max(med("raw"), 1), 2),
            "open_watches": max(r["watches"] for r in runs),
            # The first run's: later ones also count the documents the back/forward cache keeps.
            "js_heap_mib": round(runs[0]["heap"] / 2**20, 1) if runs[0]["heap"] else None,
            "first_run_ms_from_page_start": round(runs[0]["page"]),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores", "load_during": round(os.getloadavg()[0], 2),
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
        }
        print("overview-bench: " + json.dumps(figures))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(figures, f, indent=2)
    finally:
        if driver:
            driver.quit()
        stop(cp.proc)
        import shutil
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
