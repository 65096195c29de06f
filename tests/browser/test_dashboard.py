"""The dashboard in a real browser (headless Chromium, Selenium) against `flotilla up --demo 3`
(issue 27): login; the overview's three Ready clusters; Karmada's nginx sample placed 1 and 1
and Ready 2/2 without a reload; a simulated member failed through the sim's fault knob shown
not-ready; cordon for the admin, absent for a user bound to `view` (and refused by the API);
every page visited with no console error; a screenshot of each page.

The tests run in order on one control plane and one browser (they share its state).
"""

import json
import os
import re
import time

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from conftest import ADMIN_TOKEN, VIEW_TOKEN

WAIT = 120  # generous: a loaded CI machine; never a statement about speed
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def wait(driver, what, predicate, timeout=WAIT):
    last = [None]

    def attempt(d):
        try:
            got = predicate(d)
        except Exception as e:  # the page re-renders under our feet: try again
            last[0] = repr(e)
            return False
        last[0] = got
        return got

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.25).until(attempt)
    except Exception:
        raise AssertionError(f"timed out waiting for {what}; last: {last[0]}; page: {(text(driver, '#main') or '')[:2000]}")


def console_errors(driver):
    """Console entries at error level since the last call (Chrome reports failed requests
    and uncaught exceptions there too)."""
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def assert_no_console_errors(driver, where):
    errors = console_errors(driver)
    assert not errors, f"console errors on {where}: {errors}"


def login(driver, cp, token):
    driver.get(cp.dashboard)
    box = wait(driver, "the login form", lambda d: d.find_element(By.ID, "token"))
    box.clear()
    box.send_keys(token)
    driver.find_element(By.ID, "login").click()
    wait(driver, "the user's name", lambda d: d.find_element(By.ID, "username").text)


# The pages re-render from their watches at any time, so elements are read and clicked in one
# script each (an element found by one call may be gone by the next).
def texts(driver, css):
    return driver.execute_script("return [...document.querySelectorAll(arguments[0])].map(e => e.textContent)", css)


def attrs(driver, css, name):
    return driver.execute_script("return [...document.querySelectorAll(arguments[0])].map(e => e.getAttribute(arguments[1]))", css, name)


def text(driver, css):
    got = texts(driver, css)
    return got[0] if got else None


def click(driver, css):
    assert driver.execute_script("const e = document.querySelector(arguments[0]); if (e) e.click(); return !!e", css), f"nothing to click at {css}"


def cluster_rows(driver):
    return sorted(attrs(driver, "tr[data-cluster]", "data-cluster"))


def ready_of(driver, name):
    got = attrs(driver, f'tr[data-cluster="{name}"] [data-ready]', "data-ready")
    return got[0] if got else None


def shot(driver, screenshots, name, whole=False):
    """A screenshot of the window, or (`whole`) of the whole page."""
    driver.execute_script("window.scrollTo(0, 0)")
    path = os.path.join(screenshots, f"{name}.png")
    size = driver.get_window_size()
    if whole:
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(size["width"], min(max(height + 140, size["height"]), 4000))
    try:
        driver.save_screenshot(path)
    finally:
        if whole:
            driver.set_window_size(size["width"], size["height"])
    assert os.path.getsize(path) > 0


def test_login_shows_three_ready_clusters(control_plane, browser, screenshots):
    browser.get(control_plane.dashboard)
    wait(browser, "the login form", lambda d: d.find_element(By.ID, "token"))
    shot(browser, screenshots, "login")
    login(browser, control_plane, ADMIN_TOKEN)
    assert browser.find_element(By.ID, "username").text == "dashboard-admin"
    wait(browser, "3 Ready clusters", lambda d: len(cluster_rows(d)) == 3 and all(ready_of(d, n) == "True" for n in cluster_rows(d)))
    assert cluster_rows(browser) == ["member1", "member2", "member3"]
    tile = text(browser, '[data-tile="clusters-ready"] .value')
    assert tile == "3/3", tile
    # The join and register commands to copy.
    click(browser, 'button[data-action="add-cluster"]')
    wait(browser, "the join command", lambda d: (text(d, '#dialog pre[data-command="join"]') or "").startswith("flotilla join NAME --kubeconfig"))
    assert text(browser, '#dialog pre[data-command="register"]') == "flotilla token create --print-register-command"
    shot(browser, screenshots, "add-cluster")
    click(browser, '#dialog button[data-action="close"]')
    wait(browser, "the dialog closed", lambda d: not d.execute_script("return document.getElementById('dialog').open"))
    assert_no_console_errors(browser, "the overview")


def test_the_nginx_sample_appears_live(control_plane, browser, screenshots):
    renders = browser.execute_script("return window.flotilla.renders")
    control_plane.kubectl("apply", "-f", os.path.join(REPO, "examples/karmada/nginx.yaml"))
    row = 'tr[data-binding="default/nginx-deployment"]'
    wait(browser, "the nginx placement member1: 1, member2: 1",
         lambda d: text(d, f"{row} td[data-placement]") == "member1: 1, member2: 1")
    wait(browser, "nginx Ready 2/2", lambda d: attrs(d, f"{row} [data-readiness]", "data-readiness") == ["2/2"])
    # No reload: the same document re-rendered from its watches.
    assert browser.execute_script("return window.flotilla.renders") > renders
    assert browser.execute_script("return performance.getEntriesByType('navigation').length") == 1
    shot(browser, screenshots, "overview")
    assert_no_console_errors(browser, "the overview with nginx")


def test_the_workload_page_explains_the_placement(control_plane, browser, screenshots):
    click(browser, 'tr[data-binding="default/nginx-deployment"] a')
    wait(browser, "the placement table", lambda d: sorted(attrs(d, "tr[data-placed]", "data-placed")) == ["member1", "member2"])
    assert texts(browser, "tr[data-placed] td[data-replicas]") == ["1", "1"]
    assert "PropagationPolicy default/nginx-propagation" in text(browser, "#main")
    # The scheduler's explanation, from the binding's explain subresource.
    wait(browser, "the explanation", lambda d: len(texts(d, '[data-table="explain"] tbody tr')) == 3)
    explained = text(browser, '[data-table="explain"]')
    assert "selected" in explained and "member3" in explained, explained
    # The topology: template, binding, a Work and a member object per cluster, pods.
    wait(browser, "the topology's works", lambda d: set(attrs(d, "[data-graph] g[data-node]", "data-node"))
         >= {"template", "binding", "work-member1", "work-member2", "member-member1", "member-member2"})
    wait(browser, "the pods", lambda d: len(attrs(d, '[data-graph] g[data-node^="pod-"]', "data-node")) == 2)
    wait(browser, "the scale action", lambda d: texts(d, 'button[data-action="scale"]'))
    # The tour's regional override shows as member2's difference from the template.
    control_plane.kubectl("apply", "-f", os.path.join(REPO, "examples/karmada/override-by-region.yaml"))
    wait(browser, "member2's override", lambda d: '+ spec.template.spec.containers[0].image: "mirror.example.com/nginx"' in (text(d, '[data-diff="member2"]') or ""))
    assert "no overrides" in text(browser, '[data-diff="member1"]'), text(browser, '[data-diff="member1"]')
    shot(browser, screenshots, "workload", whole=True)
    assert_no_console_errors(browser, "the workload page")


def test_every_page_renders_without_console_errors(control_plane, browser, screenshots):
    # KubeFed's documented FederatedDeployment, for the KubeFed page.
    control_plane.kubectl("apply", "-f", os.path.join(REPO, "examples/kubefed/federateddeployment.yaml"))
    for href, page in [("#/cluster/member1", "cluster"), ("#/policies", "policies"), ("#/kubefed", "kubefed"), ("#/edge", "edge")]:
        name = "edge-empty" if page == "edge" else page
        browser.execute_script(f"window.location.hash = '{href}'")
        wait(browser, f"the {page} page", lambda d: texts(d, f'[data-page="{page}"]') and d.execute_script("return window.flotilla.ready"))
        if page == "policies":
            wait(browser, "nginx-propagation binding nginx", lambda d: "Deployment default/nginx" in (text(d, 'tr[data-policy="default/nginx-propagation"]') or ""))
        if page == "kubefed":
            wait(browser, "the FederatedDeployment and its overrides",
                 lambda d: "test-deployment" in text(d, '[data-page="kubefed"]') and "/spec/replicas" in text(d, '[data-page="kubefed"]'))
        if page == "cluster":
            wait(browser, "nginx placed in member1", lambda d: "Deployment default/nginx" in text(d, "#main"))
        time.sleep(1)  # let the page's loads finish before looking at the console
        shot(browser, screenshots, name)
        assert_no_console_errors(browser, f"the {page} page")
    # A KubeFed object's workload page: the member objects are what its Works carry (Deployments).
    browser.execute_script("window.location.hash = '#/workload/test-namespace/test-deployment-federateddeployment'")
    wait(browser, "the FederatedDeployment's Deployments in the members",
         lambda d: {"Deployment in member1", "Deployment in member2"} <= set(texts(d, '[data-graph] g[data-node^="member-"] text.kind')))
    wait(browser, "its pods", lambda d: len(attrs(d, '[data-graph] g[data-node^="pod-member2"]', "data-node")) == 3)
    time.sleep(1)
    shot(browser, screenshots, "workload-kubefed")
    assert_no_console_errors(browser, "a FederatedDeployment's workload page")
    browser.execute_script("window.location.hash = '#/'")
    wait(browser, "the overview", lambda d: len(cluster_rows(d)) == 3)
    # A page's collections close when it is left: the overview's nine, and no more.
    wait(browser, "the overview's watches only", lambda d: d.execute_script("return window.flotilla.openWatches()") == 9)


def test_a_failed_member_turns_not_ready_on_screen(control_plane, browser, screenshots):
    control_plane.sim_faults("member3", {"blackhole": True})
    try:
        wait(browser, "member3 not ready", lambda d: ready_of(d, "member3") != "True")
        assert ready_of(browser, "member1") == "True"
        tile = text(browser, '[data-tile="clusters-ready"] .value')
        assert tile == "2/3", tile
        shot(browser, screenshots, "overview-member-down")
    finally:
        control_plane.sim_faults("member3", {"blackhole": False})
    wait(browser, "member3 ready again", lambda d: ready_of(d, "member3") == "True")
    assert_no_console_errors(browser, "the overview while a member failed")


def taints_of(cp, name):
    return [f"{t['key']}:{t['effect']}" for t in cp.get_json("cluster", name).get("spec", {}).get("taints") or []]


def test_cordon_works_for_the_admin(control_plane, browser):
    click(browser, 'tr[data-cluster="member2"] button[data-action="cordon"]')
    wait(browser, "the cordon taint shown", lambda d: "cluster.karmada.io/unschedulable:NoSchedule" in text(d, 'tr[data-cluster="member2"]'))
    assert "cluster.karmada.io/unschedulable:NoSchedule" in taints_of(control_plane, "member2")
    wait(browser, "uncordon offered", lambda d: texts(d, 'tr[data-cluster="member2"] button[data-action="uncordon"]'))
    click(browser, 'tr[data-cluster="member2"] button[data-action="uncordon"]')
    wait(browser, "the cordon taint gone", lambda d: "unschedulable" not in text(d, 'tr[data-cluster="member2"]'))
    assert "cluster.karmada.io/unschedulable:NoSchedule" not in taints_of(control_plane, "member2")
    assert_no_console_errors(browser, "cordon and uncordon")


def test_scale_from_the_workload_page(control_plane, browser, screenshots):
    browser.execute_script("window.location.hash = '#/workload/default/nginx-deployment'")
    wait(browser, "the scale action", lambda d: texts(d, 'button[data-action="scale"]'))
    click(browser, 'button[data-action="scale"]')
    box = wait(browser, "the scale dialog", lambda d: d.find_element(By.CSS_SELECTOR, '#dialog input[name="replicas"]'))
    box.clear()
    box.send_keys("4")
    shot(browser, screenshots, "scale-dialog")
    click(browser, '#dialog button[data-action="Scale"]')
    wait(browser, "4 replicas placed 2 and 2", lambda d: texts(d, "tr[data-placed] td[data-replicas]") == ["2", "2"])
    wait(browser, "Ready 4/4", lambda d: attrs(d, "h1 [data-readiness]", "data-readiness") == ["4/4"])
    assert control_plane.get_json("deployment", "nginx", "-n", "default")["spec"]["replicas"] == 4
    browser.execute_script("window.location.hash = '#/'")
    wait(browser, "the overview", lambda d: len(cluster_rows(d)) == 3)
    assert_no_console_errors(browser, "scaling")


def test_a_viewer_sees_no_actions_and_the_api_refuses_them(control_plane, browser, screenshots):
    click(browser, "#logout")
    wait(browser, "the login form", lambda d: d.find_element(By.ID, "token"))
    login(browser, control_plane, VIEW_TOKEN)
    assert browser.find_element(By.ID, "username").text == "dashboard-viewer"
    wait(browser, "3 clusters for the viewer", lambda d: len(cluster_rows(d)) == 3 and d.execute_script("return window.flotilla.ready"))
    time.sleep(1)  # the permission reviews have answered
    assert not texts(browser, 'button[data-action="cordon"]')
    assert not texts(browser, 'button[data-action="taint"]')
    assert ready_of(browser, "member1") == "True"
    browser.execute_script("window.location.hash = '#/workload/default/nginx-deployment'")
    wait(browser, "the workload page for the viewer", lambda d: texts(d, "tr[data-placed]") and texts(d, '[data-table="explain"] tbody tr'))
    time.sleep(1)
    assert not texts(browser, 'button[data-action="scale"]')
    shot(browser, screenshots, "workload-viewer")
    assert_no_console_errors(browser, "the viewer's pages")
    # What the page does not offer, the API refuses.
    status, body = control_plane.request("GET", "/apis/cluster.karmada.io/v1alpha1/clusters/member2", VIEW_TOKEN)
    assert status == 200
    body["spec"]["taints"] = [{"key": "cluster.karmada.io/unschedulable", "effect": "NoSchedule"}]
    status, refused = control_plane.request("PUT", "/apis/cluster.karmada.io/v1alpha1/clusters/member2", VIEW_TOKEN, body)
    assert status == 403 and refused["reason"] == "Forbidden", (status, refused)
    assert "cluster.karmada.io/unschedulable:NoSchedule" not in taints_of(control_plane, "member2")


def test_the_explanation_is_an_api_a_viewer_may_read(control_plane):
    path = "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings/nginx-deployment/explain"
    status, doc = control_plane.request("GET", path, VIEW_TOKEN)
    assert status == 200, doc
    assert doc["kind"] == "BindingExplanation" and doc["result"]["scheduled"] is True, doc
    assert sorted(c["name"] for c in doc["result"]["clusters"]) == ["member1", "member2"], doc["result"]
    member3 = next(c for c in doc["attempts"][0]["clusters"] if c["name"] == "member3")
    assert member3["outcome"].startswith("dropped by ClusterAffinity"), member3
    assert "Scheduled -> member1:" in doc["text"], doc["text"]
    status, refused = control_plane.request("GET", path + "/more", VIEW_TOKEN)
    assert status == 400 and refused["reason"] == "BadRequest" and "explain takes no path" in refused["message"], refused
    status, missing = control_plane.request("GET", path.replace("nginx-deployment", "nope"), VIEW_TOKEN)
    assert status == 404, missing
    # Someone with no grant at all may not ask.
    status, _ = control_plane.request("GET", path, "not-a-token")
    assert status == 401


def test_the_dashboard_files_are_public_and_the_data_is_not(control_plane):
    import ssl
    import urllib.request

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(control_plane.dashboard, context=ctx) as r:
        assert r.status == 200
        assert "script-src 'self'" in r.headers["Content-Security-Policy"]
        assert re.search(r'src="app.js"', r.read().decode())
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(control_plane.server + "/apis/cluster.karmada.io/v1alpha1/clusters", context=ctx)
    assert e.value.code == 401


EDGE_CHANGE = """
apiVersion: edge.flotilla.io/v1alpha1
kind: EdgeChange
metadata: {{name: {name}, namespace: karmada-es-edge-1}}
spec:
  cluster: edge-1
  object: {{apiVersion: apps/v1, kind: Deployment, namespace: shop, name: {name}}}
  change: Modified
  fields: [{{path: spec.replicas, old: 2, new: 5}}]
  manager: kubectl-scale
  firstSeen: "{seen}"
  lastSeen: "{seen}"
"""


def test_the_edge_page_resolves_a_conflict(control_plane, browser, screenshots):
    """As the edge report test does, the test stands in for a pull agent: a Pull cluster that has
    not reported (offline), and the records its agent copied into its execution space with the
    edgeSync controller's decisions. The real edgeReport controller summarizes them; the page
    shows its report and resolves the conflict as `flotilla edge resolve` does."""
    cp = control_plane
    cp.kubectl("create", "-f", "-", stdin='{"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "edge-1"}, "spec": {"syncMode": "Pull"}}')
    deadline = time.time() + WAIT
    while cp.kubectl("get", "namespace", "karmada-es-edge-1", check=False).returncode != 0:
        assert time.time() < deadline, "the execution space of edge-1"
        time.sleep(0.5)
    for name, seen, decision in [("web", "2026-12-05T09:00:00Z", ("Conflict", "Conflict")), ("api", "2026-12-05T08:00:00Z", ("Decided", "Reverted")),
                                 ("fresh", "2026-12-05T09:30:00Z", None)]:
        cp.kubectl("create", "-f", "-", stdin=EDGE_CHANGE.format(name=name, seen=seen))
        if decision:
            status = {"status": {"phase": decision[0], "fields": [{"path": "spec.replicas", "outcome": decision[1]}], "message": f"{name}: {decision[1]}"}}
            cp.kubectl("-n", "karmada-es-edge-1", "patch", "edgechange", name, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    deadline = time.time() + WAIT
    while True:
        report = cp.get_json("edgereport", "edge-1").get("status", {})
        if report.get("conflicts") == 1 and len(report.get("entries", [])) == 3:
            break
        assert time.time() < deadline, f"the edge report of edge-1: {report}"
        time.sleep(0.5)
    pending = report.get("pending", 0)
    click(browser, "#logout")
    login(browser, cp, ADMIN_TOKEN)
    # The first screen says a site is offline and what waits for a decision.
    wait(browser, "edge-1 on the overview, not ready", lambda d: ready_of(d, "edge-1") not in (None, "True"))
    wait(browser, "the edge tile", lambda d: text(d, '[data-tile="edge"]') == f"Edge changes{pending} pending1 open conflict")
    browser.execute_script("window.location.hash = '#/edge'")
    wait(browser, "the report of edge-1", lambda d: f"{pending} pending · 1 open conflicts" in (text(d, '[data-edge="edge-1"]') or ""))
    assert attrs(browser, '[data-edge="edge-1"] tr[data-record]', "data-record") == [e["record"] for e in report["entries"]] == ["fresh", "web", "api"], "newest first"
    wait(browser, "the resolve actions", lambda d: texts(d, 'tr[data-record="web"] button[data-action="keep-edge"]'))
    assert not texts(browser, 'tr[data-record="api"] button'), "only a conflict is resolved"
    shot(browser, screenshots, "edge")
    click(browser, 'tr[data-record="web"] button[data-action="keep-edge"]')
    deadline = time.time() + WAIT
    while True:
        got = cp.get_json("edgechange", "web", "-n", "karmada-es-edge-1")["metadata"].get("annotations", {}).get("edge.flotilla.io/resolve")
        if got == "edge":
            break
        assert time.time() < deadline, f"the resolve annotation: {got}"
        time.sleep(0.5)
    assert_no_console_errors(browser, "the edge page")
