//! Flotilla's in-process test kit (dev-only): a control plane and simulated Push members in one
//! process ([`World`]), fixture builders for manifests ([`fixtures`]), and scenario files
//! (`tests/scenarios/*.yaml`: members and manifests in, expected member and control-plane state
//! out) that [`scenario`] parses and runs. `docs/testing.md` describes the file format.
//!
//! Start reading at [`Platform`] (what the caller supplies: the control plane, the controller
//! set and the join, which live in the binary crate that no crate may depend on), then
//! [`World::start`] and [`scenario::run`]; [`expect`] is how an expectation is matched.
//!
//! Invariants: the kit names no controller — it runs whatever the [`Platform`] starts, so
//! breaking a controller breaks the scenario that names its behaviour; expectations poll for an
//! outcome under a generous deadline and never assert how long anything took; the kit reads a
//! member through the member's own API server (faults bypassed), as an observer, while the
//! control plane reaches it over HTTPS through its faults like any member.

pub mod expect;
pub mod fixtures;
pub mod platform;
pub mod scenario;
pub mod world;

pub use platform::Platform;
pub use world::{MemberSpec, Place, World, WorldConfig};

/// One `#[test]` per scenario file, so `cargo test <name>` runs one, plus a test that every file
/// in the directory has one (and that no two files show the same behaviour):
///
/// ```ignore
/// flotilla_testkit::scenario_tests!(Flotilla, concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/scenarios");
///     propagation_duplicated, override_image_registry);
/// ```
#[macro_export]
macro_rules! scenario_tests {
    ($platform:expr, $dir:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::scenario::run_file(&$platform, &::std::path::Path::new($dir).join(concat!(stringify!($name), ".yaml")));
            }
        )*

        #[test]
        fn every_scenario_file_has_a_test_and_shows_its_own_behaviour() {
            $crate::scenario::check_directory(::std::path::Path::new($dir), &[$(stringify!($name)),*]);
        }
    };
}
