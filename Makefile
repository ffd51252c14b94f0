# The deploy build: `sam build` (BuildMethod: makefile, template.yaml) runs
# `make build-<LogicalId>` once per function, with ARTIFACTS_DIR set to where that
# function's package goes. Every such target depends on `lambda`, ONE cargo build of
# all the function binaries into one target directory: the dependencies (the AWS SDK
# among them) compile once, not once per function. The first function's make runs
# the build; the others find it fresh and only copy their bootstrap.
#
#   --profile lambda          release, with LTO, one codegen unit and symbols stripped
#                             (Cargo.toml [profile.lambda]; docs/AWS.md, "Deploy build")
#   --no-default-features     no `local` feature: no embedded backend (SQLite), and no
#                             crates/workspace-hack, whose features only local builds need
#
# Overrides: CARGO_TARGET_DIR (default: the workspace's target/), LAMBDA_TARGET
# (default: aarch64-unknown-linux-gnu, the template's arm64), LAMBDA_PROFILE.

ROOT := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
# cargo-lambda and the zig it links with, as infra/setup.sh installs them.
export PATH := $(ROOT)/.venv/bin:$(PATH)
CARGO_TARGET_DIR ?= $(ROOT)/target
export CARGO_TARGET_DIR
LAMBDA_TARGET ?= aarch64-unknown-linux-gnu
LAMBDA_PROFILE ?= lambda

# template.yaml's logical id, and the package (binary sluice-<name>) it runs.
FUNCTIONS := PublishFunction:publish ReadFunction:read GroupsFunction:groups \
	QueuesFunction:queues AdminFunction:admin JanitorFunction:janitor \
	DispatcherFunction:dispatcher

.PHONY: lambda
lambda:
	cd $(ROOT) && cargo lambda build --profile $(LAMBDA_PROFILE) --target $(LAMBDA_TARGET) \
		--no-default-features $(foreach f,$(FUNCTIONS),--package sluice-$(lastword $(subst :, ,$(f))))

define function
.PHONY: build-$(1)
build-$(1): lambda
	mkdir -p "$$(ARTIFACTS_DIR)"
	cp $(CARGO_TARGET_DIR)/lambda/sluice-$(2)/bootstrap "$$(ARTIFACTS_DIR)/bootstrap"
endef
$(foreach f,$(FUNCTIONS),$(eval $(call function,$(firstword $(subst :, ,$(f))),$(lastword $(subst :, ,$(f))))))
