//! The named set of controllers a process runs, and the `--controllers` selection with
//! kube-controller-manager's and Karmada's syntax: a comma-separated list where `*` turns on
//! every controller that is on by default, `name` turns one on and `-name` turns one off
//! (`*,-execution`: all but the execution controller). A name nobody registered is an error
//! that lists the names there are.

use futures::future::BoxFuture;

/// One controller of a set: its name, whether `*` starts it, and how to start it from the
/// process's context `C`.
pub struct Entry<C> {
    pub name: &'static str,
    pub default_on: bool,
    start: Box<dyn Fn(&C) -> BoxFuture<'static, ()> + Send + Sync>,
}

impl<C> std::fmt::Debug for Entry<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry").field("name", &self.name).field("default_on", &self.default_on).finish()
    }
}

impl<C> Entry<C> {
    /// The controller's future (spawn it).
    pub fn start(&self, ctx: &C) -> BoxFuture<'static, ()> {
        (self.start)(ctx)
    }
}

/// The controllers a process can run, in the order they start.
pub struct ControllerSet<C> {
    entries: Vec<Entry<C>>,
}

impl<C> std::fmt::Debug for ControllerSet<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.entries.iter().map(|e| e.name)).finish()
    }
}

impl<C> Default for ControllerSet<C> {
    fn default() -> Self {
        ControllerSet { entries: Vec::new() }
    }
}

impl<C> ControllerSet<C> {
    /// Add a controller; `start` builds its future from the context.
    pub fn add(&mut self, name: &'static str, default_on: bool, start: impl Fn(&C) -> BoxFuture<'static, ()> + Send + Sync + 'static) -> &mut Self {
        debug_assert!(!self.entries.iter().any(|e| e.name == name), "controller {name} registered twice");
        self.entries.push(Entry { name, default_on, start: Box::new(start) });
        self
    }

    /// Every registered name, in start order.
    pub fn names(&self) -> Vec<&'static str> {
        self.entries.iter().map(|e| e.name).collect()
    }

    /// The controllers `spec` selects, in start order; an unknown name is an error.
    pub fn select(&self, spec: &str) -> Result<Vec<&Entry<C>>, SelectError> {
        let selection = Selection::parse(spec)?;
        let known = self.names();
        let unknown: Vec<String> = selection.named().filter(|n| !known.contains(n)).map(String::from).collect();
        if !unknown.is_empty() {
            return Err(SelectError::Unknown { names: unknown, known: known.iter().map(|s| s.to_string()).collect() });
        }
        Ok(self.entries.iter().filter(|e| selection.enabled(e.name, e.default_on)).collect())
    }
}

/// Why a `--controllers` value is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectError {
    Empty,
    Unknown { names: Vec<String>, known: Vec<String> },
}

impl std::fmt::Display for SelectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SelectError::Empty => f.write_str("--controllers: an empty entry (write `*` for every default controller)"),
            SelectError::Unknown { names, known } => {
                write!(f, "--controllers: unknown controller(s) {}; known: {}", names.join(", "), known.join(", "))
            }
        }
    }
}

impl std::error::Error for SelectError {}

/// A parsed `--controllers` value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Selection {
    star: bool,
    on: Vec<String>,
    off: Vec<String>,
}

impl Selection {
    fn parse(spec: &str) -> Result<Selection, SelectError> {
        let mut s = Selection { star: false, on: Vec::new(), off: Vec::new() };
        for item in spec.split(',').map(str::trim) {
            match item {
                "" => return Err(SelectError::Empty),
                "*" => s.star = true,
                _ => match item.strip_prefix('-') {
                    Some(name) if !name.is_empty() => s.off.push(name.to_string()),
                    Some(_) => return Err(SelectError::Empty),
                    None => s.on.push(item.to_string()),
                },
            }
        }
        Ok(s)
    }

    fn named(&self) -> impl Iterator<Item = &str> {
        self.on.iter().chain(&self.off).map(String::as_str)
    }

    /// kube-controller-manager's rule: an explicit `-name` wins, then an explicit `name`, then
    /// `*` for controllers on by default.
    fn enabled(&self, name: &str, default_on: bool) -> bool {
        if self.off.iter().any(|n| n == name) {
            return false;
        }
        self.on.iter().any(|n| n == name) || (self.star && default_on)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> ControllerSet<()> {
        let mut s = ControllerSet::default();
        s.add("cluster", true, |_| Box::pin(async {}));
        s.add("execution", true, |_| Box::pin(async {}));
        s.add("hpaScaleTargetMarker", false, |_| Box::pin(async {}));
        s
    }

    fn names(spec: &str) -> Vec<&'static str> {
        set().select(spec).unwrap().iter().map(|e| e.name).collect()
    }

    #[test]
    fn star_minus_and_plus_select_as_kube_controller_manager_does() {
        assert_eq!(names("*"), ["cluster", "execution"]);
        assert_eq!(names("*,-execution"), ["cluster"]);
        assert_eq!(names("*,hpaScaleTargetMarker"), ["cluster", "execution", "hpaScaleTargetMarker"]);
        assert_eq!(names("execution"), ["execution"]);
        assert_eq!(names("-cluster,*"), ["execution"]);
    }

    #[test]
    fn unknown_and_empty_names_are_refused_with_the_known_ones() {
        let err = set().select("*,-exection").unwrap_err();
        assert_eq!(err.to_string(), "--controllers: unknown controller(s) exection; known: cluster, execution, hpaScaleTargetMarker");
        assert_eq!(set().select("*,").unwrap_err(), SelectError::Empty);
        assert_eq!(set().select("-").unwrap_err(), SelectError::Empty);
    }
}
