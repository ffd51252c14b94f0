#!/usr/bin/env python3
"""Checks that building one function package alone reuses the workspace's build.

`cargo lambda watch` builds one function at a time. Cargo then unifies
dependency features over that package only, and any crate whose features differ from
`cargo test --workspace`'s is compiled again, with everything above it (the AWS SDK
among them: minutes on two cores). crates/workspace-hack asks for the workspace's
features in every function; this script compares cargo's unit graphs (nightly's
`--unit-graph`) and names the third-party crates a function alone would still build
differently. Exit status 1 if there is one. Our own crates may differ (sluice-local's
`fault-injection` is for tests only, never in a function): they are cheap to build.
examples/push-consumer is not checked: it has no AWS SDK, and alone it builds in seconds.
"""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def unit_graph(args):
    out = subprocess.run(
        ["cargo", "+nightly", *args, "--unit-graph", "-Z", "unstable-options"],
        capture_output=True, text=True, cwd=ROOT, check=True,
    )
    return json.loads(out.stdout)["units"]


def unit_keys(units):
    """A key per unit that two builds share exactly when cargo would reuse the unit."""
    keys = {}

    def key(i):
        if i not in keys:
            u = units[i]
            deps = tuple(sorted(key(d["index"]) for d in u["dependencies"]))
            # The profile's name differs ("test" and "dev") but not what it compiles with.
            profile = {k: v for k, v in u["profile"].items() if k != "name"}
            keys[i] = (u["pkg_id"], tuple(u["features"]), u["mode"], u["target"]["name"],
                       u["platform"], json.dumps(profile, sort_keys=True), hash(deps))
        return keys[i]

    return [key(i) for i in range(len(units))]


def main():
    workspace = set(unit_keys(unit_graph(["test", "--workspace", "--all-targets", "--no-run"])))
    drift = False
    for manifest in sorted(ROOT.glob("functions/*/Cargo.toml")):
        name = "sluice-" + manifest.parent.name
        units = unit_graph(["build", "--manifest-path", str(manifest), "--bin", name])
        keys = unit_keys(units)
        rebuilt = [i for i, k in enumerate(keys) if k not in workspace]
        # The first crates that differ: every dependency of theirs is shared.
        roots = [units[i] for i in rebuilt
                 if all(keys[d["index"]] in workspace for d in units[i]["dependencies"])]
        foreign = [u for u in roots if not u["pkg_id"].startswith("path+")]
        print(f"{name}: {len(rebuilt)} of {len(units)} units not shared with the workspace build")
        for u in foreign:
            drift = True
            print(f"  {u['pkg_id'].split('#')[-1]} ({u['target']['name']}) with features {u['features']}:"
                  " add the workspace's features to crates/workspace-hack")
    sys.exit(1 if drift else 0)


if __name__ == "__main__":
    main()
