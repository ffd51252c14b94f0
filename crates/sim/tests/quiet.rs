//! The simulation cannot go quiet: over a fixed range of seeds every fault it defines fires,
//! and a core with one safety check skipped (`sluice_core::mutation`) is caught. (That the
//! checker flags a wrongly refused ack and an over-fenced commit is tested beside it, in
//! `src/checker/selftest.rs`: it needs the checker's insides.)

use std::collections::BTreeMap;

use sluice_core::mutation::{skip, Mutation};
use sluice_sim::fault::Fault;
use sluice_sim::{run_seed, Options};

/// The seeds every test here runs (and CI's budget runs too): short runs, all faults on.
const SEEDS: std::ops::Range<u64> = 1000..1012;
const STEPS: u64 = 700;

#[test]
fn every_fault_kind_and_power_cut_fires_over_the_fixed_seeds() {
    let options = Options { steps: STEPS, ..Options::default() };
    let mut fired: BTreeMap<&'static str, u64> = BTreeMap::new();
    for seed in SEEDS {
        let out = run_seed(seed, &options);
        assert!(out.violation.is_none(), "seed {seed}: {:?}", out.violation);
        for fault in Fault::ALL {
            *fired.entry(fault.name()).or_default() += out.stats.get(fault.name()).copied().unwrap_or(0);
        }
    }
    let quiet: Vec<&str> = fired.iter().filter(|(_, n)| **n == 0).map(|(k, _)| *k).collect();
    assert!(quiet.is_empty(), "never fired over seeds {SEEDS:?}: {quiet:?} (all: {fired:?})");
}

/// What push delivery's checks need to have something to check: deliveries, retries, partial
/// failures, late answers, dead letters, poison dead-lettered, events filtered out.
const PUSH_STATS: [&str; 7] =
    ["push_attempts", "push_retries", "push_partial", "push_late", "push_dead", "push_poison_dead", "push_filtered"];

#[test]
fn push_deliveries_retries_dead_letters_and_filtering_happen_over_the_fixed_seeds() {
    let options = Options { steps: STEPS, ..Options::default() };
    let mut seen: BTreeMap<&'static str, u64> = PUSH_STATS.iter().map(|s| (*s, 0)).collect();
    for seed in SEEDS {
        let out = run_seed(seed, &options);
        assert!(out.violation.is_none(), "seed {seed}: {:?}", out.violation);
        for (stat, n) in seen.iter_mut() {
            *n += out.stats.get(stat).copied().unwrap_or(0);
        }
    }
    let quiet: Vec<&str> = seen.iter().filter(|(_, n)| **n == 0).map(|(k, _)| *k).collect();
    assert!(quiet.is_empty(), "never happened over seeds {SEEDS:?}: {quiet:?} (all: {seen:?})");
}

/// The first seed of SEEDS that fails with `mutation` on (with `options`), and its violation;
/// checking that the same seed passes without it.
fn caught(mutation: Mutation, options: &Options) -> (u64, sluice_sim::Violation) {
    skip(Some(mutation));
    let caught = SEEDS.map(|seed| (seed, run_seed(seed, options))).find_map(|(seed, out)| Some((seed, out.violation?)));
    skip(None);
    let Some((seed, violation)) = caught else { panic!("a core with {mutation:?} skipped passed seeds {SEEDS:?}") };
    let out = run_seed(seed, options);
    assert!(out.violation.is_none(), "seed {seed} fails without {mutation:?} too: {:?}", out.violation);
    (seed, violation)
}

#[test]
fn a_push_ack_dropped_by_the_dispatcher_is_caught() {
    let (seed, v) = caught(Mutation::PushAck, &Options { steps: STEPS, ..Options::default() });
    assert_eq!(v.property, "push-ack-applied", "seed {seed}: {v:?}");
}

#[test]
fn a_push_batch_acked_before_its_attempt_is_caught() {
    let (seed, v) = caught(Mutation::PushHoldDuringAttempt, &Options { steps: STEPS, ..Options::default() });
    assert_eq!(v.property, "push-after-settle", "seed {seed}: {v:?}");
}

/// A key's next message taken while the one before is held: the pull queue's own key-order
/// check is set aside, so that the push checks must catch it.
#[test]
fn a_key_delivered_before_its_previous_message_settles_is_caught_by_the_push_checks() {
    let mut options = Options { steps: STEPS, ..Options::default() };
    options.allow.extend(["key-order", "two-holders"].map(str::to_owned));
    let (seed, v) = caught(Mutation::KeyedLeaseBlocks, &options);
    assert!(["push-key-order", "push-key-overlap"].contains(&v.property), "seed {seed}: {v:?}");
}

/// What the schedule and rate checks need: scheduled messages received and pushed, and
/// the quiet rate check's receives.
const SCHEDULE_STATS: [&str; 3] = ["scheduled_delivered", "scheduled_pushed", "rate_quiet_handed"];

#[test]
fn scheduled_messages_are_received_and_pushed_and_the_rate_checked_over_the_fixed_seeds() {
    let options = Options { steps: STEPS, ..Options::default() };
    let mut seen: BTreeMap<&'static str, u64> = SCHEDULE_STATS.iter().map(|s| (*s, 0)).collect();
    for seed in SEEDS {
        let out = run_seed(seed, &options);
        assert!(out.violation.is_none(), "seed {seed}: {:?}", out.violation);
        for (stat, n) in seen.iter_mut() {
            *n += out.stats.get(stat).copied().unwrap_or(0);
        }
    }
    assert!(seen.values().all(|n| *n > 0), "over seeds {SEEDS:?}: {seen:?}");
}

#[test]
fn a_scheduled_message_delivered_before_its_time_is_caught() {
    let (seed, v) = caught(Mutation::ScheduleIgnored, &Options { steps: STEPS, ..Options::default() });
    assert_eq!(v.property, "scheduled-early", "seed {seed}: {v:?}");
}

#[test]
fn a_rate_not_kept_is_caught() {
    let (seed, v) = caught(Mutation::RateIgnored, &Options { steps: STEPS, ..Options::default() });
    assert_eq!(v.property, "rate-exceeded", "seed {seed}: {v:?}");
}

#[test]
fn a_commit_fence_skipped_in_the_core_is_caught() {
    let options = Options { steps: STEPS, ..Options::default() };
    skip(Some(Mutation::CommitGenerationFence));
    let caught =
        SEEDS.map(|seed| (seed, run_seed(seed, &options))).find_map(|(seed, out)| Some((seed, out.violation?)));
    skip(None);
    let Some((seed, violation)) = caught else {
        panic!("a core that accepts stale generations' commits passed seeds {SEEDS:?}")
    };
    assert_eq!(violation.property, "fenced-commit", "seed {seed}: {violation:?}");
    // The same seed with the fence in place passes: the mutation, not the seed, was caught.
    let out = run_seed(seed, &options);
    assert!(out.violation.is_none(), "seed {seed} fails without the mutation too: {:?}", out.violation);
}

/// Only sluice-sim's tests compile the core's mutation switches: no other manifest names the
/// feature, and sluice-sim's names it as a dev-dependency's only.
#[test]
fn only_the_simulation_tests_enable_sim_mutations() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut manifests = vec![root.join("Cargo.toml"), root.join("fuzz/Cargo.toml")];
    for dir in ["crates", "functions", "examples"] {
        for entry in std::fs::read_dir(root.join(dir)).into_iter().flatten().flatten() {
            manifests.push(entry.path().join("Cargo.toml"));
        }
    }
    let mut checked = 0;
    for path in manifests {
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        checked += 1;
        let name = path.strip_prefix(&root).unwrap_or(&path).display().to_string();
        let uses: Vec<&str> = text.lines().filter(|l| l.contains("sim-mutations")).collect();
        match name.as_str() {
            // Declares it.
            "crates/core/Cargo.toml" => {
                assert!(uses.iter().all(|l| l.starts_with("sim-mutations = []") || l.starts_with('#')))
            }
            "crates/sim/Cargo.toml" => {
                let dev = text.split("[dev-dependencies]").nth(1).unwrap_or_default();
                let before = text.split("[dev-dependencies]").next().unwrap_or_default();
                assert!(dev.contains("sim-mutations") && !before.contains("sim-mutations"), "{name}: {uses:?}");
            }
            _ => assert!(uses.is_empty(), "{name} enables sim-mutations: {uses:?}"),
        }
    }
    assert!(checked > 10, "found only {checked} manifests under {}", root.display());
}
