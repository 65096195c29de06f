//! The pure scheduler as data: clusters and a binding in, `spec.clusters` (or Karmada's error
//! message) out. Vectors from Karmada's `assignment_test.go` and karmada.md §3.

mod fixtures;

use fixtures::*;
use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::policy::{ClusterAffinity, SpreadByField};
use flotilla_api::federation::karmada::work::ResourceBinding;
use flotilla_scheduler::{BindingView, ConditionReason, Outcome, ScheduleOptions, ScheduleResult, Snapshot, explain_text, schedule};

struct Case {
    name: &'static str,
    clusters: Vec<Cluster>,
    binding: ResourceBinding,
    /// `name:replicas` (or just `name` for non-workloads), in name order; or the error message.
    want: Result<&'static str, &'static str>,
}

fn run(binding: &ResourceBinding, clusters: &[Cluster]) -> Result<ScheduleResult, flotilla_scheduler::ScheduleError> {
    schedule(&BindingView::from(binding), &Snapshot::new(clusters.to_vec()), &ScheduleOptions::default())
}

fn render(result: &ScheduleResult) -> String {
    result
        .clusters
        .iter()
        .map(|t| match t.replicas {
            Some(r) => format!("{}:{r}", t.name),
            None => t.name.clone(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn check(cases: Vec<Case>) {
    for case in cases {
        let got = run(&case.binding, &case.clusters);
        let got = got.as_ref().map(render).map_err(|e| e.to_string());
        let want = case.want.map(str::to_string).map_err(str::to_string);
        assert_eq!(got, want, "case {:?}", case.name);
    }
}

fn three(rooms: [i64; 3]) -> Vec<Cluster> {
    clusters([cluster("m1").room(rooms[0]), cluster("m2").room(rooms[1]), cluster("m3").room(rooms[2])])
}

#[test]
fn static_weights_by_webster() {
    let weights = [("m1", 3), ("m2", 2), ("m3", 1)];
    check(vec![
        Case { name: "12 at 3:2:1", clusters: three([1000; 3]), binding: binding().replicas(12).static_weights(&weights).build(), want: Ok("m1:6 m2:4 m3:2") },
        Case { name: "13 at 3:2:1", clusters: three([1000; 3]), binding: binding().replicas(13).static_weights(&weights).build(), want: Ok("m1:7 m2:4 m3:2") },
        Case { name: "14 at 3:2:1", clusters: three([1000; 3]), binding: binding().replicas(14).static_weights(&weights).build(), want: Ok("m1:7 m2:5 m3:2") },
        Case {
            name: "9 at 1:2",
            clusters: three([1000; 3]),
            binding: binding().replicas(9).static_weights(&[("m1", 1), ("m2", 2)]).build(),
            want: Ok("m1:3 m2:6"),
        },
        Case {
            name: "9 at 1:3",
            clusters: three([1000; 3]),
            binding: binding().replicas(9).static_weights(&[("m1", 1), ("m2", 3)]).build(),
            want: Ok("m1:2 m2:7"),
        },
        Case {
            name: "static weights ignore capacity and the previous result",
            clusters: three([0, 0, 0]),
            binding: binding().replicas(6).static_weights(&[("m1", 1), ("m2", 1)]).scheduled(&[("m3", 6)]).build(),
            want: Ok("m1:3 m2:3"),
        },
        Case {
            name: "no weight matches: equal weights",
            clusters: three([1000; 3]),
            binding: binding().replicas(6).static_weights(&[("elsewhere", 5)]).build(),
            want: Ok("m1:2 m2:2 m3:2"),
        },
    ]);
}

#[test]
fn webster_tie_break_follows_the_uid_parity() {
    let (even, odd) = (uid_with_parity(true), uid_with_parity(false));
    let two = || clusters([cluster("m1"), cluster("m2")]);
    check(vec![
        Case {
            name: "3 over 2 equal clusters, even uid: smaller name first",
            clusters: two(),
            binding: binding().uid(&even).replicas(3).divided().build(),
            want: Ok("m1:2 m2:1"),
        },
        Case {
            name: "3 over 2 equal clusters, odd uid: larger name first",
            clusters: two(),
            binding: binding().uid(&odd).replicas(3).divided().build(),
            want: Ok("m1:1 m2:2"),
        },
        Case { name: "1 over 3, even uid", clusters: three([1000; 3]), binding: binding().uid(&even).replicas(1).divided().build(), want: Ok("m1:1") },
        Case { name: "1 over 3, odd uid", clusters: three([1000; 3]), binding: binding().uid(&odd).replicas(1).divided().build(), want: Ok("m3:1") },
    ]);
}

#[test]
fn dynamic_weights_and_aggregation() {
    check(vec![
        Case {
            name: "12 with available 6/8/10, dynamic",
            clusters: three([6, 8, 10]),
            binding: binding().replicas(12).dynamic().build(),
            want: Ok("m1:3 m2:4 m3:5"),
        },
        Case {
            name: "12 with available 6/8/10, aggregated",
            clusters: three([6, 8, 10]),
            binding: binding().replicas(12).aggregated().build(),
            want: Ok("m2:5 m3:7"),
        },
        Case {
            name: "12 with available 12/8/10, aggregated",
            clusters: three([12, 8, 10]),
            binding: binding().replicas(12).aggregated().build(),
            want: Ok("m1:12"),
        },
        Case {
            name: "steady scale up divides only the new replicas",
            clusters: three([6, 8, 10]),
            binding: binding().replicas(18).dynamic().scheduled(&[("m1", 3), ("m2", 4), ("m3", 5)]).build(),
            want: Ok("m1:5 m2:6 m3:7"),
        },
        Case {
            name: "steady scale down in proportion to the previous result",
            clusters: three([6, 8, 10]),
            binding: binding().replicas(6).dynamic().scheduled(&[("m1", 3), ("m2", 4), ("m3", 5)]).build(),
            want: Ok("m1:2 m2:2 m3:2"),
        },
        Case {
            name: "steady: unchanged replicas keep the result",
            clusters: three([0, 0, 0]),
            binding: binding().replicas(12).dynamic().scheduled(&[("m1", 12)]).build(),
            want: Ok("m1:12"),
        },
        Case {
            name: "aggregated scale up fills the clusters already used first",
            clusters: three([4, 8, 10]),
            binding: binding().replicas(6).aggregated().scheduled(&[("m1", 2)]).build(),
            want: Ok("m1:6"),
        },
        Case {
            name: "fresh reschedule divides everything anew",
            clusters: three([0, 8, 10]),
            binding: binding().replicas(12).dynamic().scheduled(&[("m1", 12)]).rebalance().build(),
            want: Ok("m1:5 m2:3 m3:4"),
        },
        Case {
            name: "a removed cluster's replicas are scaled up elsewhere",
            clusters: clusters([cluster("m2").room(10), cluster("m3").room(10)]),
            binding: binding().replicas(4).dynamic().scheduled(&[("m1", 2), ("m2", 2)]).build(),
            want: Ok("m2:3 m3:1"),
        },
        Case {
            name: "not enough room",
            clusters: three([1, 1, 1]),
            binding: binding().replicas(12).dynamic().build(),
            want: Err("failed to assign replicas: failed to scale up: Clusters available replicas 3 are not enough to schedule."),
        },
    ]);
}

#[test]
fn duplicated_and_non_workloads() {
    check(vec![
        Case {
            name: "duplicated to every cluster",
            clusters: three([1000; 3]),
            binding: binding().replicas(3).duplicated().build(),
            want: Ok("m1:3 m2:3 m3:3"),
        },
        Case { name: "no replicaScheduling means duplicated", clusters: three([1000; 3]), binding: binding().replicas(2).build(), want: Ok("m1:2 m2:2 m3:2") },
        Case {
            name: "a new matching cluster joins a duplicated binding",
            clusters: three([1000; 3]),
            binding: binding().replicas(2).duplicated().scheduled(&[("m1", 2), ("m2", 2)]).build(),
            want: Ok("m1:2 m2:2 m3:2"),
        },
        Case { name: "non-workloads get every cluster without replicas", clusters: three([0; 3]), binding: binding().divided().build(), want: Ok("m1 m2 m3") },
    ]);
}

#[test]
fn filters() {
    let tainted = || clusters([cluster("m1"), cluster("m2").taint("k", "NoSchedule"), cluster("m3").taint("k", "NoExecute")]);
    check(vec![
        Case {
            name: "untolerated NoSchedule and NoExecute taints drop clusters",
            clusters: tainted(),
            binding: binding().replicas(1).build(),
            want: Ok("m1:1"),
        },
        Case { name: "tolerated taint", clusters: tainted(), binding: binding().replicas(1).tolerate("k", "NoSchedule").build(), want: Ok("m1:1 m2:1") },
        Case {
            name: "PreferNoSchedule is ignored",
            clusters: clusters([cluster("m1").taint("k", "PreferNoSchedule")]),
            binding: binding().replicas(1).build(),
            want: Ok("m1:1"),
        },
        Case {
            name: "a taint does not move what runs",
            clusters: tainted(),
            binding: binding().replicas(4).static_weights(&[("m1", 1), ("m2", 1)]).scheduled(&[("m1", 2), ("m2", 2)]).build(),
            want: Ok("m1:2 m2:2"),
        },
        Case {
            name: "no cluster fits",
            clusters: clusters([cluster("m1").without_apis(), cluster("m2").taint("k", "NoSchedule"), cluster("m3").taint("k", "NoSchedule")]),
            binding: binding().replicas(1).build(),
            want: Err("0/3 clusters are available: 1 cluster(s) did not have the API resource, 2 cluster(s) had untolerated taint {k:NoSchedule}."),
        },
        Case {
            name: "a cluster already targeted keeps passing APIEnablement",
            clusters: clusters([cluster("m1").without_apis()]),
            binding: binding().replicas(1).scheduled(&[("m1", 1)]).build(),
            want: Ok("m1:1"),
        },
        Case {
            name: "deleting clusters are skipped",
            clusters: clusters([cluster("m1").deleting(), cluster("m2")]),
            binding: binding().replicas(1).scheduled(&[("m1", 1)]).build(),
            want: Ok("m2:1"),
        },
        Case {
            name: "only deleting clusters",
            clusters: clusters([cluster("m1").deleting()]),
            binding: binding().replicas(1).build(),
            want: Err("0/1 clusters are available: no cluster exists."),
        },
        Case {
            name: "no clusters at all",
            clusters: vec![],
            binding: binding().replicas(1).build(),
            want: Err("0/0 clusters are available: no cluster exists."),
        },
        Case {
            name: "a cluster being evicted from",
            clusters: clusters([cluster("m1"), cluster("m2")]),
            binding: binding().replicas(2).evicting_from("m1").build(),
            want: Ok("m2:2"),
        },
        Case {
            name: "spreading by region needs a region",
            clusters: clusters([cluster("m1").region("eu"), cluster("m2")]),
            binding: binding().replicas(1).duplicated().spread(SpreadByField::Cluster, 1, 5).spread(SpreadByField::Region, 1, 5).build(),
            want: Ok("m1:1"),
        },
        Case {
            name: "spreading by zone needs zones",
            clusters: clusters([cluster("m1").zones(&["z1"]), cluster("m2")]),
            binding: binding().replicas(1).duplicated().spread(SpreadByField::Zone, 1, 5).build(),
            want: Err("failed to select clusters: just support cluster and region spread constraint"),
        },
    ]);
}

#[test]
fn cluster_affinity() {
    let labelled = || {
        clusters([
            cluster("m1").label("env", "prod").region("eu").provider("aws").zones(&["eu-1a"]),
            cluster("m2").label("env", "dev").region("us").provider("gcp").zones(&["us-1a", "us-1b"]),
            cluster("m3").label("env", "prod").region("us").provider("aws"),
        ])
    };
    let exclude = ClusterAffinity { exclude: Some(vec!["m2".into()]), ..Default::default() };
    let names_and_exclude = ClusterAffinity { cluster_names: Some(vec!["m1".into(), "m2".into()]), exclude: Some(vec!["m1".into()]), ..Default::default() };
    check(vec![
        Case { name: "by names", clusters: labelled(), binding: binding().cluster_names(&["m1", "m3"]).build(), want: Ok("m1 m3") },
        Case { name: "exclude", clusters: labelled(), binding: binding().affinity(exclude).build(), want: Ok("m1 m3") },
        Case { name: "exclude wins", clusters: labelled(), binding: binding().affinity(names_and_exclude).build(), want: Ok("m2") },
        Case { name: "labels", clusters: labelled(), binding: binding().affinity(label_affinity("env", "prod")).build(), want: Ok("m1 m3") },
        Case { name: "region In", clusters: labelled(), binding: binding().affinity(field_affinity("region", "In", &["us"])).build(), want: Ok("m2 m3") },
        Case {
            name: "provider NotIn",
            clusters: labelled(),
            binding: binding().affinity(field_affinity("provider", "NotIn", &["aws"])).build(),
            want: Ok("m2"),
        },
        Case {
            name: "zone In needs every zone listed",
            clusters: labelled(),
            binding: binding().affinity(field_affinity("zone", "In", &["us-1a", "eu-1a"])).build(),
            want: Ok("m1"),
        },
        Case { name: "zone NotIn", clusters: labelled(), binding: binding().affinity(field_affinity("zone", "NotIn", &["us-1b"])).build(), want: Ok("m1 m3") },
        Case {
            name: "nothing matches",
            clusters: labelled(),
            binding: binding().cluster_names(&["other"]).build(),
            want: Err("0/3 clusters are available: 3 cluster(s) did not match the placement cluster affinity constraint."),
        },
    ]);
}

#[test]
fn cluster_affinities_fall_back_in_order() {
    let world = || clusters([cluster("m1").taint("k", "NoSchedule"), cluster("m2"), cluster("m3")]);
    let terms = [("primary", names_affinity(&["m1"])), ("backup", names_affinity(&["m2"])), ("last", names_affinity(&["m3"]))];

    let rb = binding().replicas(2).affinity_terms(&terms).build();
    let result = run(&rb, &world()).unwrap();
    assert_eq!(render(&result), "m2:2");
    assert_eq!(result.affinity_name.as_deref(), Some("backup"));
    assert_eq!(result.explanation.attempts.len(), 2);
    assert!(result.explanation.attempts[0].error.as_deref().unwrap().contains("untolerated taint"));

    // Later passes start from the observed term, even when an earlier one would fit again.
    let world_healed = clusters([cluster("m1"), cluster("m2"), cluster("m3")]);
    let rb = binding().replicas(2).affinity_terms(&terms).observed_affinity("backup").scheduled(&[("m2", 2)]).build();
    let result = run(&rb, &world_healed).unwrap();
    assert_eq!((render(&result).as_str(), result.affinity_name.as_deref()), ("m2:2", Some("backup")));

    // A fresh reschedule starts from the first term again.
    let rb = binding().replicas(2).affinity_terms(&terms).observed_affinity("backup").rebalance().build();
    assert_eq!(run(&rb, &world_healed).unwrap().affinity_name.as_deref(), Some("primary"));

    // Every term fails: the error is the first term's.
    let rb = binding().replicas(2).affinity_terms(&[("primary", names_affinity(&["m1"])), ("other", names_affinity(&["x"]))]).build();
    let error = run(&rb, &world()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "0/3 clusters are available: 1 cluster(s) had untolerated taint {k:NoSchedule}, 2 cluster(s) did not match the placement cluster affinity constraint."
    );
    assert_eq!(error.failure.reason(), ConditionReason::NoClusterFit);
    assert_eq!(error.explanation.attempts.len(), 2);
}

#[test]
fn spread_constraints() {
    check(vec![
        Case {
            name: "by cluster, duplicated: the top clusters by room",
            clusters: three([5, 10, 20]),
            binding: binding().replicas(3).duplicated().spread(SpreadByField::Cluster, 1, 2).build(),
            want: Ok("m2:3 m3:3"),
        },
        Case {
            name: "by cluster, divided: swap the weakest for a roomier cluster",
            clusters: three([39, 29, 60]),
            binding: binding().replicas(80).dynamic().spread(SpreadByField::Cluster, 1, 2).scheduled(&[("m1", 1), ("m2", 1)]).build(),
            want: Ok("m1:32 m3:48"),
        },
        Case {
            name: "by cluster: too few clusters",
            clusters: three([10, 10, 10]),
            binding: binding().replicas(3).duplicated().spread(SpreadByField::Cluster, 4, 5).build(),
            want: Err("failed to select clusters: the number of feasible clusters is less than spreadConstraint.MinGroups"),
        },
        Case {
            name: "by cluster: not enough room in any two",
            clusters: three([1, 1, 1]),
            binding: binding().replicas(10).dynamic().spread(SpreadByField::Cluster, 1, 2).build(),
            want: Err("failed to select clusters: no enough resource when selecting 2 clusters"),
        },
        Case {
            name: "static weights keep every cluster whatever the spread",
            clusters: three([10, 10, 10]),
            binding: binding().replicas(3).static_weights(&[("m1", 1), ("m2", 1), ("m3", 1)]).spread(SpreadByField::Cluster, 1, 1).build(),
            want: Ok("m1:1 m2:1 m3:1"),
        },
        Case {
            name: "by region: one cluster per region",
            clusters: clusters([cluster("m1").region("r1"), cluster("m2").region("r1"), cluster("m3").region("r2"), cluster("m4").region("r3")]),
            binding: binding().replicas(3).duplicated().spread(SpreadByField::Cluster, 2, 2).spread(SpreadByField::Region, 2, 2).build(),
            want: Ok("m1:3 m3:3"),
        },
        Case {
            name: "by region: fill up to the cluster maximum",
            clusters: clusters([cluster("m1").region("r1"), cluster("m2").region("r1"), cluster("m3").region("r2"), cluster("m4").region("r3")]),
            binding: binding().replicas(3).duplicated().spread(SpreadByField::Cluster, 2, 3).spread(SpreadByField::Region, 2, 2).build(),
            want: Ok("m1:3 m2:3 m3:3"),
        },
        Case {
            name: "by region: too few regions",
            clusters: clusters([cluster("m1").region("r1"), cluster("m2").region("r1")]),
            binding: binding().replicas(3).duplicated().spread(SpreadByField::Cluster, 1, 2).spread(SpreadByField::Region, 2, 2).build(),
            want: Err("failed to select clusters: the number of feasible region is less than spreadConstraint.MinGroups"),
        },
        Case {
            name: "by region: divided prefers the region with room",
            clusters: clusters([cluster("m1").region("r1").room(2), cluster("m2").region("r2").room(20)]),
            binding: binding().replicas(10).dynamic().spread(SpreadByField::Cluster, 1, 1).spread(SpreadByField::Region, 1, 1).build(),
            want: Ok("m2:10"),
        },
    ]);
}

#[test]
fn condition_reasons() {
    let cases: &[(ResourceBinding, Vec<Cluster>, ConditionReason)] = &[
        (binding().replicas(1).cluster_names(&["x"]).build(), three([1; 3]), ConditionReason::NoClusterFit),
        (binding().replicas(10).dynamic().build(), three([1; 3]), ConditionReason::Unschedulable),
        (binding().replicas(1).duplicated().spread(SpreadByField::Cluster, 9, 9).build(), three([1; 3]), ConditionReason::SchedulerError),
    ];
    for (rb, world, want) in cases {
        assert_eq!(run(rb, world).unwrap_err().failure.reason(), *want, "{:?}", rb.spec.placement);
    }
}

#[test]
fn explanation_names_the_plugin_that_dropped_each_cluster() {
    let world = clusters([cluster("m1"), cluster("m2").taint("k", "NoSchedule"), cluster("m3").deleting()]);
    let rb = binding().replicas(4).static_weights(&[("m1", 1), ("m2", 1)]).build();
    let result = run(&rb, &world).unwrap();
    let attempt = &result.explanation.attempts[0];
    let outcomes: Vec<(&str, &Outcome, Option<i32>)> = attempt.clusters.iter().map(|c| (c.name.as_str(), &c.outcome, c.replicas)).collect();
    assert_eq!(
        outcomes,
        vec![
            ("m1", &Outcome::Selected, Some(4)),
            ("m2", &Outcome::Filtered { plugin: "TaintToleration", reason: "cluster(s) had untolerated taint {k:NoSchedule}".into() }, None),
            ("m3", &Outcome::Deleting, None),
        ]
    );
    let text = explain_text(&BindingView::from(&rb), &Ok(result));
    for needle in [
        "ResourceBinding(default/nginx-deployment)",
        "strategy:  StaticWeight (4 replicas)",
        "result:    Scheduled -> m1:4",
        "APIEnablement",
        "dropped by TaintToleration: cluster(s) had untolerated taint {k:NoSchedule}",
        "skipped: cluster is being deleted",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    let failed = binding().replicas(1).cluster_names(&["x"]).build();
    let text = explain_text(&BindingView::from(&failed), &run(&failed, &world));
    assert!(text.contains("result:    NoClusterFit: 0/3 clusters are available"), "{text}");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn world() -> impl Strategy<Value = Vec<Cluster>> {
        prop::collection::vec((0i64..40, any::<bool>(), any::<bool>(), 0u8..3), 1..7).prop_map(|specs| {
            specs
                .into_iter()
                .enumerate()
                .map(|(i, (room, tainted, deleting, region))| {
                    let mut c = cluster(&format!("m{i}")).room(room).region(&format!("r{region}"));
                    if tainted {
                        c = c.taint("k", "NoSchedule");
                    }
                    if deleting {
                        c = c.deleting();
                    }
                    c.build()
                })
                .collect()
        })
    }

    fn placement_binding() -> impl Strategy<Value = ResourceBinding> {
        (1i32..60, 0u8..5, prop::collection::vec(0i64..5, 6), any::<bool>(), prop::collection::vec((0usize..6, 0i32..5), 0..4)).prop_map(
            |(replicas, kind, weights, even, previous)| {
                let b = binding().uid(&uid_with_parity(even)).replicas(replicas);
                let names: Vec<String> = (0..6).map(|i| format!("m{i}")).collect();
                let weighted: Vec<(&str, i64)> = names.iter().map(String::as_str).zip(weights).collect();
                let previous: Vec<(&str, i32)> = previous.iter().map(|(i, r)| (names[*i].as_str(), *r)).collect();
                let b = match kind {
                    0 => b.duplicated(),
                    1 => b.divided(),
                    2 => b.static_weights(&weighted),
                    3 => b.dynamic(),
                    _ => b.aggregated(),
                };
                let mut rb = b.build();
                let mut seen = std::collections::BTreeSet::new();
                let previous: Vec<_> = previous.into_iter().filter(|(n, _)| seen.insert(*n)).collect();
                if !previous.is_empty() {
                    rb = BindingBuilderExt(rb).scheduled(&previous);
                }
                rb
            },
        )
    }

    /// Re-wrap a built binding to set `spec.clusters`.
    struct BindingBuilderExt(ResourceBinding);
    impl BindingBuilderExt {
        fn scheduled(mut self, clusters: &[(&str, i32)]) -> ResourceBinding {
            self.0.spec.clusters = Some(
                clusters
                    .iter()
                    .map(|(n, r)| flotilla_api::federation::karmada::work::TargetCluster { name: n.to_string(), replicas: Some(*r), start_ordinal: None })
                    .collect(),
            );
            self.0
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Divided placements place exactly the binding's replicas whenever they schedule.
        #[test]
        fn divided_places_every_replica(world in world(), rb in placement_binding()) {
            let divided = rb.spec.placement.as_ref().unwrap().replica_scheduling.as_ref()
                .is_some_and(|s| s.replica_scheduling_type == Some(flotilla_api::federation::karmada::policy::ReplicaSchedulingType::Divided));
            if let Ok(result) = run(&rb, &world) {
                let total: i32 = result.clusters.iter().map(|t| t.replicas.unwrap_or(0)).sum();
                if divided {
                    prop_assert_eq!(total, rb.spec.replicas.unwrap());
                }
                prop_assert!(result.clusters.iter().all(|t| t.replicas.unwrap_or(0) > 0));
            }
        }

        /// Static weights always schedule (capacity plays no part) when a cluster fits.
        #[test]
        fn static_weights_schedule_when_a_cluster_fits(world in world(), replicas in 1i32..100) {
            let rb = binding().replicas(replicas).divided().build();
            let fits = world.iter().any(|c| c.metadata.deletion_timestamp.is_none() && c.spec.taints.is_none());
            prop_assert_eq!(run(&rb, &world).is_ok(), fits);
        }

        /// No result names a cluster the filters dropped, or a deleting one.
        #[test]
        fn results_stay_within_the_filter_result(world in world(), rb in placement_binding()) {
            if let Ok(result) = run(&rb, &world) {
                let attempt = result.explanation.attempts.last().unwrap();
                for target in &result.clusters {
                    let explained = attempt.clusters.iter().find(|c| c.name == target.name).unwrap();
                    prop_assert_eq!(&explained.outcome, &Outcome::Selected);
                    prop_assert!(explained.filters.iter().all(|v| v.verdict.is_pass()));
                    let cluster = world.iter().find(|c| c.metadata.name.as_deref() == Some(target.name.as_str())).unwrap();
                    prop_assert!(cluster.metadata.deletion_timestamp.is_none());
                }
            }
        }

        /// The same input gives the same output, whatever order the clusters come in.
        #[test]
        fn deterministic(world in world(), rb in placement_binding()) {
            let first = run(&rb, &world);
            let mut reversed = world.clone();
            reversed.reverse();
            prop_assert_eq!(&first, &run(&rb, &world));
            prop_assert_eq!(&first, &run(&rb, &reversed));
        }
    }
}
