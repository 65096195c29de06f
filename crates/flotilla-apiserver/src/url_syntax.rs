//! Which strings are URLs the way Kubernetes' CEL `isURL` decides: Go's `url.ParseRequestURI`
//! succeeds — an absolute URL (`https://host:8080/p?q`, `mailto:x`) or an absolute path
//! (`/p`), with a well-formed authority and percent-escapes. Fragments are not split off
//! (a request URI has none), so `#` is path text.

/// `url.ParseRequestURI(s)` succeeds.
pub fn is_request_uri(s: &str) -> bool {
    if s.is_empty() || s.bytes().any(|b| b < b' ' || b == 0x7f) {
        return false;
    }
    if s == "*" {
        return true;
    }
    let Some((scheme, rest)) = split_scheme(s) else {
        return false;
    };
    let rest = match rest.strip_suffix('?') {
        Some(r) if !r.contains('?') => r,
        _ => rest.split_once('?').map_or(rest, |(r, _query)| r),
    };
    if !rest.starts_with('/') {
        // `scheme:opaque` is a URL; a relative path is not a request URI.
        return !scheme.is_empty();
    }
    let path = match rest.strip_prefix("//").filter(|_| !scheme.is_empty()) {
        Some(after) => {
            let (authority, path) = after.find('/').map_or((after, ""), |i| after.split_at(i));
            if !authority_ok(authority) {
                return false;
            }
            path
        }
        None => rest,
    };
    escapes_ok(path)
}

/// The scheme (possibly empty) and the rest; None for `:` with no scheme before it.
fn split_scheme(s: &str) -> Option<(&str, &str)> {
    for (i, c) in s.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return None,
            b':' => return Some((&s[..i], &s[i + 1..])),
            _ => return Some(("", s)),
        }
    }
    Some(("", s))
}

fn authority_ok(authority: &str) -> bool {
    let (userinfo, host) = match authority.rfind('@') {
        Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
        None => (None, authority),
    };
    host_ok(host) && userinfo.is_none_or(|u| u.bytes().all(|c| c.is_ascii_alphanumeric() || b"-._:~!$&'()*+,;=%@".contains(&c)) && escapes_ok(u))
}

fn host_ok(host: &str) -> bool {
    let port_ok = |p: &str| p.is_empty() || p.strip_prefix(':').is_some_and(|d| d.bytes().all(|c| c.is_ascii_digit()));
    // A port after the host or after a bracketed IPv6 literal is digits.
    let port = if host.starts_with('[') {
        let Some(i) = host.rfind(']') else { return false };
        &host[i + 1..]
    } else {
        host.rfind(':').map_or("", |i| &host[i..])
    };
    if !port_ok(port) {
        return false;
    }
    // Percent-escapes in a host may not encode ASCII controls; only these characters may
    // appear unescaped.
    let b = host.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                if !hex_escape_at(b, i) || (hex(b[i + 1]) < 8 && &host[i..i + 3] != "%25") {
                    return false;
                }
                i += 3;
            }
            c if c < 0x80 && !(c.is_ascii_alphanumeric() || b"!$&'()*+,;=:[]<>\"-_.~".contains(&c)) => {
                return false;
            }
            _ => i += 1,
        }
    }
    true
}

/// Every `%` starts a two-digit hex escape.
fn escapes_ok(s: &str) -> bool {
    let b = s.as_bytes();
    (0..b.len()).all(|i| b[i] != b'%' || hex_escape_at(b, i))
}

fn hex_escape_at(b: &[u8], i: usize) -> bool {
    i + 2 < b.len() && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit()
}

fn hex(c: u8) -> u8 {
    (c as char).to_digit(16).unwrap_or(0) as u8
}

#[cfg(test)]
mod tests {
    use super::is_request_uri;

    #[test]
    fn request_uris_as_go_parses_them() {
        for ok in [
            "https://example.com",
            "https://user:pw@example.com:8443/a%20b?q=1",
            "http://[::1]:80/",
            "mailto:someone@example.com",
            "/just/a/path",
            "*",
            "HTTP://EXAMPLE.COM",
            "https://example.com/#frag",
            "https://example.com?",
        ] {
            assert!(is_request_uri(ok), "{ok}");
        }
        for bad in [
            "",
            "example.com",
            "relative/path",
            "://x",
            "https://exa mple.com",
            "https://example.com:80a/",
            "https://x/%zz",
            "http://[::1/",
            "a\tb",
            "https://ex{ample}.com",
            "https://%00/",
        ] {
            assert!(!is_request_uri(bad), "{bad}");
        }
    }
}
