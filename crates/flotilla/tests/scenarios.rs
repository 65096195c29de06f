//! The scenario files in `tests/scenarios/` (one behaviour each: members and manifests in,
//! expected member and control-plane state out), each run by `flotilla-testkit` on a control
//! plane and simulated Push members in this process — the same control plane, controller set and
//! join as `flotilla up --demo`. `cargo test -p flotilla --test scenarios <name>` runs one;
//! `docs/testing.md` says how to add one.

mod support;

use support::platform::Flotilla;

flotilla_testkit::scenario_tests!(Flotilla, concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/scenarios");
    application_failover_suppressed_deletion,
    cluster_affinity_field_selector,
    cluster_affinity_label_selector,
    cluster_override_on_auto_propagated_namespace,
    cluster_policy_suspension_holds_dispatch,
    cluster_propagation_policy_cluster_scoped,
    cluster_taint_policy_follows_conditions,
    cluster_unreachable_not_ready,
    conflict_abort_keeps_member_object,
    conflict_overwrite_takes_over,
    custom_resource_in_a_karmada_named_group,
    dependencies_follow_the_workload,
    dependency_policy_conflict_resolved,
    divided_dynamic_available_replicas,
    divided_static_weights,
    events_on_the_template,
    failover_gate_off_taint_evicts_nothing,
    failover_taint_graceful_eviction,
    failover_state_preserved_on_the_replacement,
    kubefed_federated_deployment_overrides,
    kubefed_placement_shrink_deletes,
    kubefed_replica_scheduling_preference,
    lazy_activation_waits_for_a_template_change,
    member_drift_reverted,
    namespace_sync_to_every_member,
    override_image_registry,
    override_labels_by_cluster_label,
    override_plaintext,
    policy_explicit_priority,
    policy_preemption,
    priority_class_sets_the_binding_priority,
    remedy_actions_follow_conditions,
    policy_selecting_nothing_reported,
    propagation_duplicated,
    propagation_policy_over_cluster_policy,
    spread_constraints_by_region,
    status_aggregated_onto_template,
    suspension_holds_dispatch,
    taints_and_tolerations,
    template_deletion_removes_member_copies,
    template_update_reaches_members,
    work_status_applied,
    workload_affinity_groups_workloads,
);
