//! The command line of `sluice-sim scale`.

use sluice_sim::scale::{ScaleArgs, Workload};

fn usage() -> ! {
    eprintln!(
        "usage: sluice-sim scale --workload publish|queue|group|push --partitions P --clients N --seconds S \\
         [--batch B] [--subscriptions K] [--rate R] [--seed X] [--trace] \\
         [--keyed] [--stage-rps R] [--stage-burst B] [--long-poll-rps R] [--long-poll-burst B] \\
         [--window-ms MS] [--receiver-ms MS] [--max-in-flight N] [--sub-rate N]"
    );
    std::process::exit(2)
}

fn value<T: std::str::FromStr>(args: &mut impl Iterator<Item = String>) -> T {
    args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| usage())
}

/// The arguments after `scale`; exits with the usage on anything else.
pub fn parse(mut args: impl Iterator<Item = String>) -> ScaleArgs {
    let mut a = ScaleArgs::new(Workload::Publish);
    let mut workload = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--workload" => {
                workload = Some(match args.next().as_deref() {
                    Some("publish") => Workload::Publish,
                    Some("queue") => Workload::Queue,
                    Some("group") => Workload::Group,
                    Some("push") => Workload::Push,
                    _ => usage(),
                })
            }
            "--partitions" => a.partitions = value(&mut args),
            "--clients" => a.clients = value(&mut args),
            "--seconds" => a.seconds = value(&mut args),
            "--batch" => a.batch = value(&mut args),
            "--subscriptions" => a.subscriptions = value(&mut args),
            "--rate" => a.rate = value(&mut args),
            "--seed" => a.seed = value(&mut args),
            "--trace" => a.trace = true,
            "--keyed" => a.keyed = true,
            "--stage-rps" => a.stage.0 = value(&mut args),
            "--stage-burst" => a.stage.1 = value(&mut args),
            "--long-poll-rps" => a.long_poll.0 = value(&mut args),
            "--long-poll-burst" => a.long_poll.1 = value(&mut args),
            "--window-ms" => a.window_ms = value(&mut args),
            "--receiver-ms" => a.receiver_ms = value(&mut args),
            "--max-in-flight" => a.max_in_flight = value(&mut args),
            "--sub-rate" => a.sub_rate = Some(value(&mut args)),
            _ => usage(),
        }
    }
    a.workload = workload.unwrap_or_else(|| usage());
    if a.partitions == 0 || a.clients == 0 || a.seconds == 0 || a.batch == 0 {
        usage()
    }
    a
}
