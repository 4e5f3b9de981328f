#!/usr/bin/env bash
# Builds `muster-step` (srun, scontrol and the node daemon of every job's node pods) as one
# statically linked program: node pods copy it from the operator image into whatever image
# the job runs, which may have no C library at all (distroless, `FROM scratch`, Alpine).
#
# Static glibc (`-C target-feature=+crt-static` on the `*-linux-gnu` target), not musl: it
# needs only the toolchain that builds everything else (no musl std, no rustup target), and
# since glibc 2.34 the `files` and `dns` name services are part of libc itself, so a static
# program resolves the job's node names (the pod's /etc/hosts and the cluster DNS of its
# /etc/resolv.conf) without loading anything from the image. muster-step looks up nothing but
# host names (no users, no groups), and a static build pins those to `files dns` whatever the
# image's nsswitch.conf names (cli/src/step/mod.rs, `pin_name_services`).
#
#   docker/build-muster-step.sh [--release] OUT    (run from the repository root)
#
# Used by docker/operator.Dockerfile (--release) and .ci/test (the job that runs it in an
# empty image, cli/tests/step_operator.rs).
set -euo pipefail

profile=dev dir=debug
if [ "${1:-}" = --release ]; then
  profile=release dir=release
  shift
fi
out=${1:?usage: $0 [--release] OUT}
target="$(uname -m)-unknown-linux-gnu"
# --target keeps RUSTFLAGS off build scripts and proc macros, which must stay dynamic.
RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --locked --profile "$profile" --target "$target" -p muster-cli --bin muster-step
bin="${CARGO_TARGET_DIR:-target}/$target/$dir/muster-step"
# A static program has no program interpreter (no ld-linux to find in the image).
if LC_ALL=C readelf --program-headers "$bin" | grep -q 'INTERP'; then
  echo "$bin is dynamically linked: it would not run in an image without glibc" >&2
  exit 1
fi
install -D -m 0755 "$bin" "$out"
