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

The functions get the workspace's features through their default `local` feature. The deploy
build (the Makefile) turns it off, and this script checks that what it then builds keeps out
what a function on AWS does not need: SQLite, a second TLS stack (native-tls, OpenSSL, or
the AWS SDK's legacy rustls 0.21) or crypto library (aws-lc), and crates/workspace-hack itself.
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


# Crates the deploy build must not compile, and why.
NOT_DEPLOYED = {
    "rusqlite": "SQLite (the embedded backend)",
    "libsqlite3-sys": "SQLite (the embedded backend)",
    "native-tls": "a second TLS stack",
    "openssl-sys": "a second TLS stack",
    "aws-lc-sys": "a second crypto library (rustls uses ring, for reqwest and the AWS SDK alike)",
    "sluice-workspace-hack": "the workspace's features, for local builds only",
}


def deploy_check(manifests):
    """The units of the Makefile's build: every function, no default features, arm64."""
    packages = [arg for m in manifests for arg in ("--package", "sluice-" + m.parent.name)]
    units = unit_graph(["build", "--no-default-features", "--target", "aarch64-unknown-linux-gnu", *packages])
    bad = False
    names = {}
    for u in units:
        # "source#name@version", or "source#version" when the source's last segment is the name.
        source, _, fragment = u["pkg_id"].rpartition("#")
        name, _, version = fragment.rpartition("@")
        names.setdefault(name or source.rstrip("/").rsplit("/", 1)[-1], set()).add(version)
    for name, why in NOT_DEPLOYED.items():
        if name in names:
            bad = True
            print(f"deploy build: compiles {name} ({why}): see the functions' `local` feature")
    if len(names.get("rustls", ())) > 1:
        bad = True
        print(f"deploy build: two TLS stacks, rustls {sorted(names['rustls'])}: see the AWS SDK's features in Cargo.toml")
    print(f"deploy build: {len(units)} units, rustls {sorted(names.get('rustls', ()))}")
    return bad


def main():
    workspace = set(unit_keys(unit_graph(["test", "--workspace", "--all-targets", "--no-run"])))
    drift = False
    manifests = sorted(ROOT.glob("functions/*/Cargo.toml"))
    for manifest in manifests:
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
    drift |= deploy_check(manifests)
    sys.exit(1 if drift else 0)


if __name__ == "__main__":
    main()
