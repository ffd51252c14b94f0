//! `cargo run -p sluice-sim --profile sim -- --seeds 1000..1200 --steps 2000`: runs each seed,
//! prints one line per seed, and on the first failure the seed, the step, the property and
//! a one-line reproduction; exits non-zero if any seed failed. With `SLUICE_SIM_CALLS=1`,
//! `--trace` also shows every store call and every write's items and conditions, and
//! whether it applied (the same history otherwise): what tells which operation wrote an
//! index item.
//!
//! `sluice-sim scale --workload publish|queue|group|push --partitions P --clients N --seconds S
//! [--batch B] [--subscriptions K] [--rate R] [--seed X] [--trace]`: the scale model of the
//! AWS deployment (`sluice_sim::scale`); prints one JSON line.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Instant;

use sluice_sim::{run_seed, Options};

mod scale_args;

fn usage() -> ! {
    eprintln!(
        "usage: sluice-sim [--seeds A..B | --seeds N] [--steps N] [--trace] [--allow PROP,...] \\
         [--xfail SEED:PROP,...] [--strict] [--no-faults] [--keep-going] [--quiet]"
    );
    std::process::exit(2)
}

/// What the command line asks for.
struct Args {
    seeds: std::ops::Range<u64>,
    options: Options,
    trace: bool,
    keep_going: bool,
    quiet: bool,
    xfail: BTreeSet<(u64, String)>,
}

fn parse_args() -> Args {
    let mut seeds = 1000..1200u64;
    let mut options = Options::default();
    let mut trace = false;
    let mut keep_going = false;
    let mut quiet = false;
    let mut xfail: BTreeSet<(u64, String)> = BTreeSet::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seeds" => {
                let v = args.next().unwrap_or_else(|| usage());
                seeds = match v.split_once("..") {
                    Some((a, b)) => a.parse().unwrap_or_else(|_| usage())..b.parse().unwrap_or_else(|_| usage()),
                    None => {
                        let s: u64 = v.parse().unwrap_or_else(|_| usage());
                        s..s + 1
                    }
                };
            }
            "--steps" => options.steps = args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| usage()),
            "--trace" => trace = true,
            "--no-faults" => options.no_faults = true,
            // Also fail on documented behaviour (a member without positions skipping a lost answer).
            "--strict" => options.allow.clear(),
            "--keep-going" => keep_going = true,
            "--quiet" => quiet = true,
            "--allow" => {
                let v = args.next().unwrap_or_else(|| usage());
                options.allow.extend(v.split(',').filter(|s| !s.is_empty()).map(str::to_owned));
            }
            "--xfail" => {
                let v = args.next().unwrap_or_else(|| usage());
                for item in v.split(',').filter(|s| !s.is_empty()) {
                    let (seed, prop) = item.split_once(':').unwrap_or_else(|| usage());
                    xfail.insert((seed.parse().unwrap_or_else(|_| usage()), prop.to_owned()));
                }
            }
            _ => usage(),
        }
    }
    options.keep_trace = trace;
    Args { seeds, options, trace, keep_going, quiet, xfail }
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("scale") {
        let args = scale_args::parse(std::env::args().skip(2));
        println!("{}", sluice_sim::scale::run(&args));
        return ExitCode::SUCCESS;
    }
    let Args { seeds, options, trace, keep_going, quiet, xfail } = parse_args();
    let started = Instant::now();
    let (mut failed, mut expected, mut ran) = (0u64, 0u64, 0u64);
    let mut first: Option<String> = None;
    for seed in seeds.clone() {
        let t = Instant::now();
        let out = run_seed(seed, &options);
        ran += 1;
        if trace {
            for line in &out.lines {
                println!("{line}");
            }
        }
        let stats: Vec<String> = out.stats.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let allowed: Vec<String> = out.allowed.iter().map(|v| format!("{}@{}", v.property, v.step)).collect();
        match &out.violation {
            None => {
                if !quiet {
                    println!(
                        "seed {seed} ok {:.2}s hash {:016x} lines {}{} {}",
                        t.elapsed().as_secs_f64(),
                        out.hash,
                        out.trace_lines,
                        if allowed.is_empty() { String::new() } else { format!(" allowed [{}]", allowed.join(" ")) },
                        stats.join(" ")
                    );
                }
            }
            Some(v) if xfail.contains(&(seed, v.property.to_owned())) => {
                expected += 1;
                println!("seed {seed} XFAIL {} at step {}: {}", v.property, v.step, v.detail);
            }
            Some(v) => {
                failed += 1;
                let repro = format!(
                    "cargo run -p sluice-sim --profile sim -- --seeds {seed} --steps {}{} --trace",
                    options.steps,
                    if options.no_faults { " --no-faults" } else { "" }
                );
                println!("seed {seed} FAILED {} at step {}: {}", v.property, v.step, v.detail);
                println!("  reproduce: {repro}");
                first.get_or_insert(format!("first failing seed {seed} ({}): {repro}", v.property));
                if !keep_going {
                    break;
                }
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{ran} seeds in {secs:.1}s ({:.2} seeds/s): {failed} failed, {expected} expected failures",
        ran as f64 / secs.max(1e-9)
    );
    if let Some(first) = first {
        println!("{first}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
