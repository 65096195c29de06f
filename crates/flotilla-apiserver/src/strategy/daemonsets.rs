//! DaemonSets: the creating manager owns the template-generation annotation.

use super::Strategy;

pub(super) struct DaemonSets;

impl Strategy for DaemonSets {
    /// kube-apiserver's field manager sees the annotation (its conversion to apps/v1 writes
    /// it), so the creating manager owns what the create's defaults add.
    fn owns_create_defaults(&self) -> bool {
        true
    }
}
