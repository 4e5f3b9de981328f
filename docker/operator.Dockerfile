# syntax=docker/dockerfile:1.7
# The Muster operator image: a release build of `muster-operator` on distroless (glibc, no
# shell, no package manager), running as the non-root user 65532. It also carries
# `muster-step` (srun, scontrol, the node daemon) as a static binary at
# /usr/local/bin/muster-step: every job's node pods copy it from this image in an init
# container (`--step-image`), whatever their own image is.
#
#   docker buildx build -f docker/operator.Dockerfile -t ghcr.io/muster-dev/muster-operator:0.1.0 .
#
# Build from the repository root (the whole Cargo workspace is the context; see
# operator.Dockerfile.dockerignore for what is left out).

# The builder and the runtime share Debian 12 (bookworm), so the binary's glibc matches.
ARG RUST_VERSION=1.89
FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p muster-operator --bin muster-operator \
 && install -D -m 0755 target/release/muster-operator /out/muster-operator
# muster-step must run in any user image: statically linked (see the script for why glibc).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target,sharing=locked \
    docker/build-muster-step.sh --release /out/muster-step

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="muster-operator" \
      org.opencontainers.image.description="Muster: Slurm-style gang scheduling for Kubernetes GPU clusters (operator)" \
      org.opencontainers.image.source="https://github.com/muster-dev/muster" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/muster-operator /usr/local/bin/muster-operator
COPY --from=build /out/muster-step /usr/local/bin/muster-step
USER 65532:65532
# /metrics, /healthz, /readyz
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/muster-operator"]
