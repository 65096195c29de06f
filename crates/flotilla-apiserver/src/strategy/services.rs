//! Services: names are DNS-1035 labels (they become DNS names and environment variables).

use super::Strategy;
use crate::meta::NameRule;

pub(super) struct Services;

impl Strategy for Services {
    fn name_rule(&self) -> NameRule {
        NameRule::Dns1035Label
    }
}
