//! The allowlist: the Markdown table between `<!-- allowlist:start -->` and
//! `<!-- allowlist:end -->` in `docs/conformance.md`, one row per known divergence:
//!
//! ```text
//! | case | step | path | reason |
//! |------|------|------|--------|
//! | `crud-service-create` | `create` | `$.spec.clusterIP` | deliberate: ADR 0004 |
//! ```
//!
//! `case`, `step` and `path` are globs where `*` matches any run of characters; backticks are
//! decoration. Every row needs a reason. A row that matches no divergence in a full run is stale.

use crate::diff::Divergence;

const START: &str = "<!-- allowlist:start -->";
const END: &str = "<!-- allowlist:end -->";

/// One known divergence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// 1-based line in the Markdown file.
    pub line: usize,
    pub case: String,
    pub step: String,
    pub path: String,
    pub reason: String,
}

impl Row {
    pub fn matches(&self, d: &Divergence) -> bool {
        glob(&self.case, &d.case) && glob(&self.step, &d.step) && glob(&self.path, &d.path)
    }
}

/// The parsed table.
#[derive(Clone, Debug, Default)]
pub struct Allowlist {
    pub rows: Vec<Row>,
}

fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cur.push('|');
                chars.next();
            }
            '|' => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter().map(|c| c.trim().trim_matches('`').trim().to_string()).collect()
}

impl Allowlist {
    pub fn parse(markdown: &str) -> Result<Allowlist, String> {
        let lines: Vec<&str> = markdown.lines().collect();
        let start = lines.iter().position(|l| l.trim() == START).ok_or(format!("no {START} marker"))?;
        let end = lines.iter().position(|l| l.trim() == END).ok_or(format!("no {END} marker"))?;
        if end < start {
            return Err("allowlist end marker before its start".into());
        }
        let mut rows = Vec::new();
        let mut header_seen = false;
        for (i, line) in lines.iter().enumerate().take(end).skip(start + 1) {
            let line_no = i + 1;
            if line.trim().is_empty() {
                continue;
            }
            if !line.trim_start().starts_with('|') {
                return Err(format!("line {line_no}: only the table goes between the allowlist markers"));
            }
            let c = cells(line);
            if !header_seen {
                if c != ["case", "step", "path", "reason"] {
                    return Err(format!("line {line_no}: the header must be | case | step | path | reason |"));
                }
                header_seen = true;
                continue;
            }
            if c.iter().all(|x| x.chars().all(|ch| ch == '-' || ch == ':')) {
                continue;
            }
            if c.len() != 4 {
                return Err(format!("line {line_no}: {} cells, want 4", c.len()));
            }
            if c.iter().any(String::is_empty) {
                return Err(format!("line {line_no}: every cell needs a value (reason included)"));
            }
            rows.push(Row { line: line_no, case: c[0].clone(), step: c[1].clone(), path: c[2].clone(), reason: c[3].clone() });
        }
        Ok(Allowlist { rows })
    }

    /// The first row that names this divergence.
    pub fn find(&self, d: &Divergence) -> Option<usize> {
        self.rows.iter().position(|r| r.matches(d))
    }
}

/// `*` matches any run of characters (including none); everything else literally.
pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && p[pi] != '*' && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("*", ""));
        assert!(glob("crud-*", "crud-configmap"));
        assert!(glob("*.metadata.managedFields", "$.items[0].metadata.managedFields"));
        assert!(!glob("crud-*", "errors-x"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxbyy"));
    }

    #[test]
    fn parses_the_table() {
        let md = "intro\n<!-- allowlist:start -->\n| case | step | path | reason |\n|---|---|---|---|\n| `a-*` | `*` | `$.x\\|y` | not implemented yet: x |\n<!-- allowlist:end -->\n";
        let a = Allowlist::parse(md).unwrap();
        assert_eq!(a.rows.len(), 1);
        assert_eq!(a.rows[0].path, "$.x|y");
        assert_eq!(a.rows[0].line, 5);
        let bad = md.replace("not implemented yet: x", "");
        assert!(Allowlist::parse(&bad).is_err());
    }
}
