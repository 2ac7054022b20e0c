"""Messages and gRPC stubs generated from gpucompute/v1/compute.proto at build time."""
