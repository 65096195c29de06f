//! Fault knobs on a member's API, as a client sees them: added latency, an error rate, a
//! blackhole (requests accepted and never answered while it lasts) and refused connections
//! (the member's own listener is closed; see `fleet`). Node failure and capacity changes act on
//! the simulated nodes instead (`nodes`).
//!
//! Randomness (jitter, which requests fail) comes from one seeded generator per member, so a
//! run with the same seed and the same request order sees the same faults. Faults apply to
//! requests from outside only: the member's own simulator keeps working, as a partitioned
//! cluster's controllers do.

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use flotilla_apiserver::error::ApiError;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;

use crate::config::parse_duration;

/// The fault knobs of one member. Serialized as the admin endpoint shows and takes them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct FaultSettings {
    /// Added before every request is handled (`50ms`).
    #[serde(with = "duration_text")]
    pub latency: Duration,
    /// Up to this much more, uniformly at random.
    #[serde(with = "duration_text")]
    pub latency_jitter: Duration,
    /// The fraction of requests answered with an error, from 0 to 1.
    pub error_rate: f64,
    /// The code of those errors: 500 (InternalError), 503 (ServiceUnavailable), 429
    /// (TooManyRequests) or 504 (Timeout).
    pub error_code: u16,
    /// Requests are accepted and never answered while this is set.
    pub blackhole: bool,
    /// Connections to the member's own listener are refused while this is set.
    pub refuse: bool,
    /// Seed of the member's fault randomness.
    pub seed: u64,
}

impl Default for FaultSettings {
    fn default() -> Self {
        FaultSettings { latency: Duration::ZERO, latency_jitter: Duration::ZERO, error_rate: 0.0, error_code: 500, blackhole: false, refuse: false, seed: 1 }
    }
}

impl FaultSettings {
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.error_rate) {
            return Err(format!("errorRate {} is not between 0 and 1", self.error_rate));
        }
        if !matches!(self.error_code, 429 | 500 | 503 | 504) {
            return Err(format!("errorCode {} is not one of 429, 500, 503, 504", self.error_code));
        }
        Ok(())
    }

    /// These settings with a JSON merge patch applied (`{"latency": "50ms", "blackhole": true}`).
    pub fn merged(&self, patch: &Value) -> Result<FaultSettings, String> {
        let mut v = serde_json::to_value(self).map_err(|e| e.to_string())?;
        let Some(p) = patch.as_object() else { return Err("the fault settings must be a JSON object".into()) };
        for (k, x) in p {
            if x.is_null() {
                v[k] = serde_json::to_value(FaultSettings::default()).map_err(|e| e.to_string())?[k].clone();
            } else {
                v[k] = x.clone();
            }
        }
        let s: FaultSettings = serde_json::from_value(v).map_err(|e| e.to_string())?;
        s.validate()?;
        Ok(s)
    }
}

mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}ms", d.as_millis()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_duration(&text).ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not a duration (250ms, 2s, 1m)")))
    }
}

/// The live fault state of one member.
pub struct Faults {
    settings: watch::Sender<FaultSettings>,
    rng: Mutex<StdRng>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults").field("settings", &*self.settings.borrow()).finish()
    }
}

impl Faults {
    pub fn new(settings: FaultSettings) -> Faults {
        let rng = Mutex::new(StdRng::seed_from_u64(settings.seed));
        Faults { settings: watch::Sender::new(settings), rng }
    }

    pub fn get(&self) -> FaultSettings {
        self.settings.borrow().clone()
    }

    /// Replace the settings (validated); a new seed restarts the random sequence.
    pub fn set(&self, settings: FaultSettings) -> Result<(), String> {
        settings.validate()?;
        if settings.seed != self.settings.borrow().seed {
            *self.rng.lock() = StdRng::seed_from_u64(settings.seed);
        }
        self.settings.send_replace(settings);
        Ok(())
    }

    /// Follow changes (the listener watches `refuse`).
    pub fn subscribe(&self) -> watch::Receiver<FaultSettings> {
        self.settings.subscribe()
    }

    /// What happens to a request before it is handled: it waits out a blackhole and the
    /// latency, then either proceeds (`None`) or gets the injected error.
    pub async fn before_request(&self) -> Option<Response> {
        if self.settings.borrow().blackhole {
            let mut rx = self.settings.subscribe();
            // Never answered while the blackhole lasts; lifted, the request goes through, as
            // TCP retransmissions would after a partition heals.
            let _ = rx.wait_for(|s| !s.blackhole).await;
        }
        let (delay, fail, code) = {
            let s = self.settings.borrow();
            let mut rng = self.rng.lock();
            let jitter = if s.latency_jitter.is_zero() { Duration::ZERO } else { s.latency_jitter.mul_f64(rng.random_range(0.0..1.0)) };
            let fail = s.error_rate > 0.0 && rng.random_bool(s.error_rate);
            (s.latency + jitter, fail, s.error_code)
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        fail.then(|| injected_error(code).into_response())
    }
}

fn injected_error(code: u16) -> ApiError {
    let message = "the simulated member is injecting errors (fault knob errorRate)";
    match code {
        429 => ApiError::too_many_requests(1).with_message(message),
        503 => ApiError::unavailable(message),
        504 => ApiError::timeout(message),
        _ => ApiError::internal(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_and_validation() {
        let s = FaultSettings::default();
        let m = s.merged(&serde_json::json!({"latency": "50ms", "errorRate": 0.5})).unwrap();
        assert_eq!(m.latency, Duration::from_millis(50));
        assert_eq!(m.error_rate, 0.5);
        let back = m.merged(&serde_json::json!({"latency": null})).unwrap();
        assert_eq!(back.latency, Duration::ZERO);
        assert!(s.merged(&serde_json::json!({"errorRate": 2.0})).is_err());
        assert!(s.merged(&serde_json::json!({"bogus": 1})).is_err());
        assert!(s.merged(&serde_json::json!({"latency": "soon"})).is_err());
    }

    /// The same seed fails the same requests.
    #[tokio::test]
    async fn error_rate_is_seeded() {
        let pattern = |seed| async move {
            let f = Faults::new(FaultSettings { error_rate: 0.5, seed, ..Default::default() });
            let mut out = Vec::new();
            for _ in 0..32 {
                out.push(f.before_request().await.is_some());
            }
            out
        };
        let a = pattern(7).await;
        assert_eq!(a, pattern(7).await);
        assert!(a.iter().any(|x| *x) && a.iter().any(|x| !*x));
    }
}
