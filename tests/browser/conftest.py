"""Fixtures of the dashboard's browser tests: `flotilla up --demo N` with bearer tokens from a
token file, and headless Chromium driven by Selenium through Debian's chromium-driver.

Everything started here binds to loopback and is stopped when the session ends, even on a
failure. Screenshots go to $FLOTILLA_SCREENSHOTS (default: a temporary directory).
"""

import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.request

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

ADMIN_TOKEN = "dashboard-admin-token-0123456789abcdef"
VIEW_TOKEN = "dashboard-viewer-token-0123456789abcdef"


class ControlPlane:
    def __init__(self, proc, data, kubeconfig, server):
        self.proc = proc
        self.data = data
        self.kubeconfig = kubeconfig
        self.server = server
        self.dashboard = server + "/dashboard/"

    def kubectl(self, *args, kubeconfig=None, stdin=None, check=True):
        out = subprocess.run(
            [kubectl_bin(), "--kubeconfig", kubeconfig or self.kubeconfig, *args],
            input=stdin, capture_output=True, text=True, timeout=60,
        )
        if check and out.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {out.stderr}")
        return out

    def get_json(self, *args):
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def request(self, method, path, token, body=None):
        """A request with a bearer token, outside the browser: (status, parsed body)."""
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def sim_faults(self, member, faults):
        """Set a simulated member's fault knobs through the fleet's admin endpoint."""
        admin = os.path.join(self.data, "demo", "fleet-admin.kubeconfig")
        self.kubectl("create", "--raw", f"/sim/v1/members/{member}/faults", "-f", "-", kubeconfig=admin, stdin=json.dumps(faults))


def kubectl_bin():
    return shutil.which("kubectl") or "/usr/lib/google-cloud-sdk/bin/kubectl.1.33"


def start_control_plane(members, extra_args=()):
    binary = os.environ.get("FLOTILLA_BIN")
    assert binary and os.path.exists(binary), "set FLOTILLA_BIN to the flotilla binary"
    root = tempfile.mkdtemp(prefix="flotilla-browser-")
    data = os.path.join(root, "data")
    tokens = os.path.join(root, "tokens.csv")
    with open(tokens, "w") as f:
        f.write(f'{ADMIN_TOKEN},dashboard-admin,uid-admin,"system:masters"\n')
        f.write(f"{VIEW_TOKEN},dashboard-viewer,uid-viewer\n")
    # Short health timings: a failed member turns not-ready within seconds.
    args = [binary, "up", "--listen", "127.0.0.1:0", "--data-dir", data, "--token-auth-file", tokens,
            "--demo", str(members),
            "--cluster-status-update-frequency", "1s", "--cluster-probe-timeout", "1s",
            "--cluster-failure-threshold", "3s", "--cluster-success-threshold", "1s", *extra_args]
    log = open(os.path.join(root, "flotilla.log"), "w")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True,
                            env={**os.environ, "FLOTILLA_LOG": os.environ.get("FLOTILLA_LOG", "warn")})
    kubeconfig = None
    joined = 0
    deadline = time.time() + 600
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.match(r"flotilla: admin kubeconfig: (.*)", line.strip())
        if m:
            kubeconfig = m.group(1)
        if line.startswith("demo: ") and "members joined" in line:
            joined = members
            break
    if not kubeconfig or joined != members:
        stop(proc)
        raise AssertionError(f"flotilla up --demo {members} did not start; log in {root}/flotilla.log")
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    with open(kubeconfig) as f:
        server = re.search(r"server: (https://\S+)", f.read()).group(1)
    return ControlPlane(proc, data, kubeconfig, server), root


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="session")
def control_plane():
    cp, root = start_control_plane(3)
    try:
        # The viewer is bound to the bootstrap role `view`, nothing else.
        cp.kubectl("create", "clusterrolebinding", "dashboard-viewer", "--clusterrole=view", "--user=dashboard-viewer")
        yield cp
    finally:
        stop(cp.proc)
        shutil.rmtree(root, ignore_errors=True)


def new_driver(extra_args=()):
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("FLOTILLA_CHROMIUM", "/usr/bin/chromium")
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                # The control plane's certificate is signed by its own CA.
                "--ignore-certificate-errors", "--window-size=1400,1000", "--no-first-run", *extra_args]:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=os.environ.get("FLOTILLA_CHROMEDRIVER", "/usr/bin/chromedriver"))
    return webdriver.Chrome(options=options, service=service)


@pytest.fixture(scope="session")
def browser():
    driver = new_driver()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="session")
def screenshots():
    out = os.environ.get("FLOTILLA_SCREENSHOTS") or tempfile.mkdtemp(prefix="flotilla-screenshots-")
    os.makedirs(out, exist_ok=True)
    print(f"screenshots in {out}")
    return out
