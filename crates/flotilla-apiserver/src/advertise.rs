//! The address a server advertises to its clients (`/api`'s `serverAddressByClientCIDRs`, the
//! `default/kubernetes` endpoints, the admin kubeconfig): the one asked for, else the one it
//! listens on, else — listening on every address — the address of the interface that carries
//! the default route, as kube-apiserver chooses its host interface.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};

/// Why no address could be chosen.
#[derive(Debug, thiserror::Error)]
pub enum AdvertiseError {
    #[error("--advertise-address {0} is not an address clients can reach: give a specific address")]
    Unspecified(IpAddr),
    #[error("listening on {listen}, and no default route to choose an address by ({reason}): set --advertise-address")]
    NoDefaultRoute { listen: IpAddr, reason: String },
}

/// The advertised IP: `explicit`, else `listen` when it is a specific address, else the
/// default-route interface's address of `listen`'s family (IPv4 first for `::`).
pub fn advertise_ip(explicit: Option<IpAddr>, listen: IpAddr) -> Result<IpAddr, AdvertiseError> {
    if let Some(ip) = explicit {
        return if ip.is_unspecified() { Err(AdvertiseError::Unspecified(ip)) } else { Ok(ip) };
    }
    if !listen.is_unspecified() {
        return Ok(listen);
    }
    let table = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    let v4 = || default_route_gateway(&table).map(IpAddr::V4).and_then(source_address);
    // No IPv6 route table is read: the kernel picks the source for a global destination.
    let v6 = || source_address(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)));
    let chosen = match listen {
        IpAddr::V6(_) => v4().or_else(v6),
        IpAddr::V4(_) => v4(),
    };
    chosen.ok_or_else(|| AdvertiseError::NoDefaultRoute {
        listen,
        reason: if table.is_empty() { "/proc/net/route is not readable".into() } else { "none in /proc/net/route".into() },
    })
}

/// The gateway of the default route with the lowest metric in a `/proc/net/route` table
/// (`0.0.0.0` for a default route without a gateway).
pub fn default_route_gateway(table: &str) -> Option<Ipv4Addr> {
    const RTF_UP: u32 = 0x1;
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (dest, gateway, flags, metric, mask) = (hex(f.get(1)?)?, hex(f.get(2)?)?, hex(f.get(3)?)?, f.get(6)?.parse::<u32>().ok()?, hex(f.get(7)?)?);
            // The kernel prints addresses in host (little-endian) byte order.
            (dest == 0 && mask == 0 && flags & RTF_UP != 0).then(|| (metric, Ipv4Addr::from(gateway.to_le_bytes())))
        })
        .min_by_key(|(metric, _)| *metric)
        .map(|(_, gateway)| gateway)
}

/// The local address the kernel would send from towards `to` (a connected UDP socket sends
/// nothing). A gateway of `0.0.0.0` asks for a documentation address instead, which only the
/// default route carries.
fn source_address(to: IpAddr) -> Option<IpAddr> {
    let to = match to {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        other => other,
    };
    let local: IpAddr = if to.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
    let socket = UdpSocket::bind((local, 0)).ok()?;
    socket.connect((to, 9)).ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_unspecified() && !ip.is_loopback()).then_some(ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
        eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
        wlan0\t00000000\t0101A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n\
        eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n";

    #[test]
    fn the_default_route_with_the_lowest_metric_wins() {
        assert_eq!(default_route_gateway(TABLE), Some(Ipv4Addr::new(192, 0, 2, 1)));
        let only_subnet = TABLE.lines().take(2).collect::<Vec<_>>().join("\n");
        assert_eq!(default_route_gateway(&only_subnet), None);
        assert_eq!(default_route_gateway(""), None);
    }

    #[test]
    fn asked_then_listened_on_then_chosen() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let ten: IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(advertise_ip(Some(ten), lo).unwrap(), ten);
        assert_eq!(advertise_ip(None, lo).unwrap(), lo);
        assert_eq!(advertise_ip(None, ten).unwrap(), ten);
        assert!(matches!(advertise_ip(Some(Ipv4Addr::UNSPECIFIED.into()), lo), Err(AdvertiseError::Unspecified(_))));
        // Listening everywhere: an address of this host that is neither loopback nor
        // unspecified, or an error that says what to set.
        match advertise_ip(None, Ipv4Addr::UNSPECIFIED.into()) {
            Ok(ip) => assert!(!ip.is_loopback() && !ip.is_unspecified(), "{ip}"),
            Err(e) => assert!(e.to_string().contains("--advertise-address"), "{e}"),
        }
    }
}
