# gpucompute server image.
#
#   docker build -t gpucompute:latest .
#   docker build --build-arg CUDA_ARCHITECTURES=90 -t gpucompute:hopper .
#   docker run --rm --gpus all -p 50051:50051 -p 8002:8002 gpucompute:latest
#
# Two stages:
#   build    the CUDA 13.0 devel image; the same scripts as a source build:
#            scripts/setup installs scripts/debian-packages.txt, scripts/build
#            runs CMake for the server, the CLI and the load test.
#            Tests are not built here (GPUCOMPUTE_BUILD_TESTS=OFF): they run
#            through scripts/test, and an image build has no GPU to run the
#            GPU tests on.
#   runtime  the matching CUDA runtime image (CUDA runtime and cuBLAS), the
#            shared libraries of gRPC, protobuf, abseil, prometheus-cpp and
#            OpenSSL, the three executables, and an unprivileged user.
#
# The host needs an NVIDIA driver of the 580 series or newer (CUDA 13.0) and
# the NVIDIA Container Toolkit. Without a GPU the server falls back to the CPU
# backend (--backend=auto).

ARG CUDA_VERSION=13.0.2
ARG UBUNTU_VERSION=24.04

FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu${UBUNTU_VERSION} AS build

# Compute capabilities to compile for: Ampere (80, 86), Ada (89), Hopper (90).
# CMake embeds SASS and PTX for each, so newer GPUs run the compute_90 PTX
# through the driver's JIT. Never `all` or `all-major`: with this CMake they
# name architectures that CUDA 13 no longer supports.
ARG CUDA_ARCHITECTURES="80;86;89;90"

WORKDIR /src

# The package list alone first, so this layer stays cached until it changes.
COPY scripts/setup scripts/debian-packages.txt scripts/
RUN scripts/setup && rm -rf /var/lib/apt/lists/*

# scripts/build: cmake --preset release (Ninja, Release, into build/) <these flags>,
# then cmake --build of the listed targets.
COPY . .
RUN GPUCOMPUTE_BUILD_TARGETS="gpucompute-server gpucompute gpucompute-loadtest" \
    scripts/build \
        -DGPUCOMPUTE_WITH_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}" \
        -DGPUCOMPUTE_BUILD_TESTS=OFF


FROM nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu${UBUNTU_VERSION} AS runtime

LABEL org.opencontainers.image.title="gpucompute" \
      org.opencontainers.image.description="gRPC server for GPU MatMul, Transpose and Reduce"

# Runtime halves of the -dev packages the build used (Ubuntu 24.04 names).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libgrpc++1.51t64 \
        libprotobuf32t64 \
        libabsl20220623t64 \
        libprometheus-cpp-core1.0 \
        libssl3t64 \
        libjemalloc2 \
 && rm -rf /var/lib/apt/lists/*

# A fixed, unprivileged UID/GID, so that Kubernetes' runAsNonRoot can verify
# it and volume ownership is predictable. /var/lib/gpucompute holds the
# autotune cache.
RUN groupadd --gid 10001 gpucompute \
 && useradd --uid 10001 --gid 10001 --no-create-home \
        --home-dir /var/lib/gpucompute --shell /usr/sbin/nologin gpucompute \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/gpucompute

COPY --from=build /src/build/server/gpucompute-server \
                  /src/build/client/cli/gpucompute \
                  /src/build/client/loadtest/gpucompute-loadtest \
                  /usr/local/bin/

# Fail the build, not the first start, when a shared library is missing.
# libcuda.so.1 is the host driver's: the NVIDIA container runtime mounts it
# when the container starts, so it is the one library allowed to be absent.
RUN ! ldd /usr/local/bin/gpucompute-server /usr/local/bin/gpucompute \
          /usr/local/bin/gpucompute-loadtest \
      | grep 'not found' | grep -v 'libcuda\.so'

USER 10001:10001
WORKDIR /var/lib/gpucompute

# gRPC (Compute, health, reflection) and the Prometheus /metrics endpoint.
EXPOSE 50051 8002

# NOT_SERVING until calibration is done and while draining; the start period
# covers the first calibration.
HEALTHCHECK --interval=15s --timeout=5s --start-period=180s --retries=3 \
    CMD ["gpucompute", "health", "--server", "127.0.0.1:50051"]

# SIGTERM: stop accepting, finish in-flight requests, exit 0. Give it time
# (docker run --stop-timeout, Compose stop_grace_period).
STOPSIGNAL SIGTERM
ENTRYPOINT ["gpucompute-server", "--listen=0.0.0.0:50051", "--metrics_listen=0.0.0.0:8002"]
