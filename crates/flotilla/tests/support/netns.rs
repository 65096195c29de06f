//! Network namespaces of a test's own, each with a veth pair to the host and a server in it:
//! addresses that kube-apiserver accepts as pod IPs (Kubernetes refuses loopback endpoints) and
//! that the host reaches. Needs root and `ip` (iproute2); removed with their servers when
//! dropped, even when the test fails.

use std::process::{Child, Command, Stdio};

pub struct NetNs {
    name: String,
    host_if: String,
    server: Option<Child>,
    /// The namespace's address (`/30` with the host's end).
    pub ip: String,
}

/// Whether this machine can make namespaces; when not, a test that needs them is skipped with
/// a note, unless the test command requires every suite to run (FLOTILLA_REQUIRE_TESTENV=1).
pub fn available(what: &str) -> bool {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let ip_tool = Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success());
    if !root || !ip_tool {
        assert!(std::env::var("FLOTILLA_REQUIRE_TESTENV").as_deref() != Ok("1"), "{what} needs root and `ip` (iproute2)");
        eprintln!("SKIPPED {what}: needs root and `ip`");
        return false;
    }
    true
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl NetNs {
    /// Namespace `index` (0..5) of this test process under `prefix` (three letters, unique per
    /// test binary), addressed `10.<octet>.<n>.2` with the host at `.1`.
    pub fn new(prefix: &str, octet: u8, index: u32) -> NetNs {
        assert!(index < 5 && prefix.len() == 3);
        let tag = std::process::id() % 10_000;
        // A subnet no interface on the host has (one left behind by a killed run would take the
        // traffic and answer nothing).
        let taken = String::from_utf8_lossy(&Command::new("ip").args(["-o", "-4", "addr", "show"]).output().expect("run ip").stdout).to_string();
        let subnet = (0..250)
            .map(|k| ((std::process::id() % 50) * 5 + index + k * 5) % 250 + 1)
            .find(|n| !taken.contains(&format!(" 10.{octet}.{n}.")))
            .expect("a free subnet");
        // Made first, so whatever is set up below is removed if a step fails.
        let ns = NetNs {
            name: format!("flt-{prefix}-{tag}-{index}"),
            host_if: format!("{prefix}{tag}{index}h"),
            server: None,
            ip: format!("10.{octet}.{subnet}.2"),
        };
        let peer = format!("{prefix}{tag}{index}n");
        ip(&["netns", "add", &ns.name]);
        ip(&["link", "add", &ns.host_if, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", &ns.name]);
        ip(&["addr", "add", &format!("10.{octet}.{subnet}.1/30"), "dev", &ns.host_if]);
        ip(&["link", "set", &ns.host_if, "up"]);
        ip(&["netns", "exec", &ns.name, "ip", "addr", "add", &format!("{}/30", ns.ip), "dev", &peer]);
        ip(&["netns", "exec", &ns.name, "ip", "link", "set", &peer, "up"]);
        ip(&["netns", "exec", &ns.name, "ip", "link", "set", "lo", "up"]);
        ns
    }

    /// Runs `program args` inside the namespace as its server (output discarded).
    pub fn spawn(&mut self, program: &str, args: &[&str]) {
        self.stop_server();
        self.server = Some(
            Command::new("ip")
                .args(["netns", "exec", &self.name, program])
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start the server in the namespace"),
        );
    }

    /// Kills the namespace's server (its address stays, refusing connections).
    pub fn stop_server(&mut self) {
        if let Some(mut s) = self.server.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        self.stop_server();
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
        let _ = Command::new("ip").args(["link", "del", &self.host_if]).output();
    }
}
