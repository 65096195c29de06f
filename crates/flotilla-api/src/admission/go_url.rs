//! The parts of Go's `net/url.Parse` that Karmada's and KubeFed's endpoint validation relies on,
//! so the same strings are accepted and rejected (e.g. `10.0.0.1:6443` is rejected by Go: "first
//! path segment in URL cannot contain colon", although the upstream messages suggest IP:port).

/// A parsed URL: only what the validators look at.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct GoUrl {
    pub scheme: String,
    pub has_user: bool,
    pub user: String,
    pub host: String,
    pub raw_query: String,
    pub fragment: String,
}

impl GoUrl {
    /// `url.URL.Port()`: the digits after the host's last colon (outside IPv6 brackets).
    pub fn port(&self) -> &str {
        let after_host = match self.host.rfind(']') {
            Some(i) => &self.host[i + 1..],
            None => &self.host,
        };
        match after_host.rfind(':') {
            Some(i) => &after_host[i + 1..],
            None => "",
        }
    }
}

/// `url.Parse(raw)`; the error text is Go's (`parse "x": missing protocol scheme`).
pub(crate) fn parse(raw: &str) -> Result<GoUrl, String> {
    let (without_fragment, fragment) = match raw.split_once('#') {
        Some((u, f)) => (u, f),
        None => (raw, ""),
    };
    let wrap = |e: &str| format!("parse {without_fragment:?}: {e}");
    if without_fragment.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(wrap("net/url: invalid control character in URL"));
    }
    let mut url = GoUrl { fragment: fragment.to_string(), ..GoUrl::default() };
    let (scheme, rest) = scheme(without_fragment).map_err(&wrap)?;
    url.scheme = scheme.to_ascii_lowercase();
    let mut rest = rest;
    if rest.ends_with('?') && rest.matches('?').count() == 1 {
        rest = &rest[..rest.len() - 1];
    } else if let Some((r, q)) = rest.split_once('?') {
        rest = r;
        url.raw_query = q.to_string();
    }
    if !rest.starts_with('/') {
        if !url.scheme.is_empty() {
            return Ok(url); // opaque: no host
        }
        let segment = rest.split('/').next().unwrap_or("");
        if segment.contains(':') {
            return Err(wrap("first path segment in URL cannot contain colon"));
        }
    }
    if (!url.scheme.is_empty() || !rest.starts_with("///")) && rest.starts_with("//") {
        let authority = &rest[2..];
        let authority = authority.split('/').next().unwrap_or("");
        let host = match authority.rfind('@') {
            Some(i) => {
                url.has_user = true;
                url.user = authority[..i].to_string();
                &authority[i + 1..]
            }
            None => authority,
        };
        check_host(host).map_err(|e| wrap(&e))?;
        url.host = host.to_string();
    }
    Ok(url)
}

fn scheme(raw: &str) -> Result<(&str, &str), &'static str> {
    for (i, c) in raw.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' => {
                if i == 0 {
                    return Ok(("", raw));
                }
            }
            b':' => {
                if i == 0 {
                    return Err("missing protocol scheme");
                }
                return Ok((&raw[..i], &raw[i + 1..]));
            }
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

fn check_host(host: &str) -> Result<(), String> {
    let valid_port = |p: &str| p.is_empty() || (p.starts_with(':') && p[1..].bytes().all(|b| b.is_ascii_digit()));
    if host.starts_with('[') {
        let Some(end) = host.rfind(']') else {
            return Err("missing ']' in host".to_string());
        };
        let port = &host[end + 1..];
        if !valid_port(port) {
            return Err(format!("invalid port {port:?} after host"));
        }
    } else if let Some(i) = host.rfind(':') {
        let port = &host[i..];
        if !valid_port(port) {
            return Err(format!("invalid port {port:?} after host"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_go() {
        let u = parse("https://10.0.0.1:6443").unwrap();
        assert_eq!((u.scheme.as_str(), u.host.as_str(), u.port()), ("https", "10.0.0.1:6443", "6443"));
        assert!(parse("10.0.0.1:6443").unwrap_err().contains("first path segment in URL cannot contain colon"));
        let opaque = parse("member1:6443").unwrap();
        assert_eq!((opaque.scheme.as_str(), opaque.host.as_str()), ("member1", ""));
        assert!(parse(":6443").unwrap_err().contains("missing protocol scheme"));
        assert!(parse("https://h:x1").unwrap_err().contains("invalid port"));
        let u = parse("https://user@h/p?q=1#f").unwrap();
        assert!(u.has_user);
        assert_eq!((u.raw_query.as_str(), u.fragment.as_str()), ("q=1", "f"));
        assert_eq!(parse("https://[::1]:443").unwrap().port(), "443");
    }
}
