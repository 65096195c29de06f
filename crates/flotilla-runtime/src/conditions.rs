//! Conditions with Kubernetes' transition-time rule (`meta.SetStatusCondition`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Set condition `new` in `conditions`: `lastTransitionTime` changes only when the status does
/// (Kubernetes' `meta.SetStatusCondition`). Returns true when anything changed.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            if old.status == new.status {
                new.last_transition_time = old.last_transition_time.clone();
            }
            let changed =
                old.status != new.status || old.reason != new.reason || old.message != new.message || old.observed_generation != new.observed_generation;
            *old = new;
            changed
        }
        None => {
            conditions.push(new);
            true
        }
    }
}

/// A condition stamped now.
pub fn condition(type_: &str, status: bool, reason: &str, message: impl Into<String>, observed_generation: Option<i64>) -> Condition {
    Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation,
        last_transition_time: Time(jiff::Timestamp::now()),
    }
}

/// The status of condition `type_`, if present.
pub fn condition_status<'a>(conditions: Option<&'a [Condition]>, type_: &str) -> Option<&'a Condition> {
    conditions?.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let mut list = vec![];
        let mut first = condition("Ready", true, "ClusterReady", "ok", None);
        first.last_transition_time = Time(jiff::Timestamp::UNIX_EPOCH);
        assert!(set_condition(&mut list, first));
        assert!(!set_condition(&mut list, condition("Ready", true, "ClusterReady", "ok", None)));
        assert_eq!(list[0].last_transition_time.0, jiff::Timestamp::UNIX_EPOCH);
        assert!(set_condition(&mut list, condition("Ready", false, "ClusterNotReachable", "down", None)));
        assert_ne!(list[0].last_transition_time.0, jiff::Timestamp::UNIX_EPOCH);
    }
}
