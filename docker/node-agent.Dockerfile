# syntax=docker/dockerfile:1.7
# The Muster node agent image: a release build of `muster-node-agent` on distroless cc
# (glibc: the agent dlopen()s the driver's libnvidia-ml.so.1 at run time, which a static musl
# binary could not). Non-root by default; the chart runs it as UID 0 with CAP_KILL only under
# policy kill.
#
#   docker buildx build -f docker/node-agent.Dockerfile -t ghcr.io/muster-dev/muster-node-agent:0.1.0 .
#
# The image holds no NVIDIA library: the NVIDIA container runtime mounts the node's driver
# libraries and /dev/nvidia* (RuntimeClass nvidia, or the runtime as the node's default).

ARG RUST_VERSION=1.89
FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p muster-node-agent --bin muster-node-agent \
 && install -D -m 0755 target/release/muster-node-agent /out/muster-node-agent

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="muster-node-agent" \
      org.opencontainers.image.description="Muster: GPU inventory, health and binding enforcement (node agent)" \
      org.opencontainers.image.source="https://github.com/muster-dev/muster" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/muster-node-agent /usr/local/bin/muster-node-agent
# Outside Kubernetes (docker run --runtime nvidia ... inventory) the NVIDIA runtime then
# exposes every GPU and only the NVML libraries; the chart sets the same in the pod.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
# Where the NVIDIA runtimes put libnvidia-ml.so.1: the Debian multiarch directories (legacy
# runtime), the host's own path under CDI (/usr/lib64 on RHEL-like hosts), and GKE's
# driver installer (/usr/local/nvidia/lib64).
ENV LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu:/usr/lib/aarch64-linux-gnu:/usr/lib64:/usr/local/nvidia/lib64
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/muster-node-agent"]
