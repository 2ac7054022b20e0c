// Registers the CUDA variants: each wraps a launcher from the kernel files
// and turns CUDA and cuBLAS errors into absl::Status.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <functional>

#include "absl/strings/str_cat.h"
#include "cuda/matmul/matmul_kernels.h"
#include "cuda/reduce/reduce_kernels.h"
#include "cuda/transpose/transpose_kernels.h"
#include "gpucompute/kernels/registry.h"

namespace gpucompute::kernels {
namespace {

using cuda::TransposeKind;

absl::Status FromCuda(cudaError_t err, const std::string& variant) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("CUDA error in ", variant, ": ", cudaGetErrorName(err),
                                          ": ", cudaGetErrorString(err)));
}

absl::Status FromCublas(int status, const std::string& variant) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cuBLAS error in ", variant, ": ",
                                          cublasGetStatusName(cublasStatus_t(status)), ": ",
                                          cublasGetStatusString(cublasStatus_t(status))));
}

cudaStream_t StreamOf(const LaunchContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

// The launcher of one variant, given typed pointers; instantiated for float
// and double.
template <typename T>
using TypedLaunch = std::function<absl::Status(const Problem&, const T* a, const T* b, T* out,
                                               const Buffers&, const LaunchContext&)>;

Variant MakeVariant(Op op, std::string name, std::string description, bool with_double,
                    bool reduced_precision, std::function<size_t(const Problem&)> workspace,
                    TypedLaunch<float> launch_float, TypedLaunch<double> launch_double) {
  Variant v;
  v.op = op;
  v.name = std::move(name);
  v.description = std::move(description);
  v.dtypes = with_double ? std::vector<DType>{DType::kFloat32, DType::kFloat64}
                         : std::vector<DType>{DType::kFloat32};
  v.reduced_precision = reduced_precision;
  v.backend = Backend::kCuda;
  v.workspace_bytes = workspace;
  v.launch = [name = v.name, op, workspace, launch_float, launch_double](
                 const Problem& p, const Buffers& buf,
                 const LaunchContext& ctx) -> absl::Status {
    if (p.op != op) return absl::InvalidArgumentError(absl::StrCat(name, ": wrong op"));
    const size_t needed = workspace ? workspace(p) : 0;
    if (buf.workspace_bytes < needed || (needed > 0 && buf.workspace == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " needs ", needed,
                                                     " bytes of workspace, got ",
                                                     buf.workspace_bytes));
    }
    if (p.dtype == DType::kFloat32) {
      return launch_float(p, static_cast<const float*>(buf.a), static_cast<const float*>(buf.b),
                          static_cast<float*>(buf.out), buf, ctx);
    }
    if (!launch_double) {
      return absl::InvalidArgumentError(absl::StrCat(name, " does not support FLOAT64"));
    }
    return launch_double(p, static_cast<const double*>(buf.a), static_cast<const double*>(buf.b),
                         static_cast<double*>(buf.out), buf, ctx);
  };
  return v;
}

// ---- MatMul ----

template <typename T>
TypedLaunch<T> Naive(const std::string& name) {
  return [name](const Problem& p, const T* a, const T* b, T* c, const Buffers&,
                const LaunchContext& ctx) {
    return FromCuda(cuda::LaunchNaiveMatMul<T>(a, b, c, p.m, p.n, p.k, StreamOf(ctx)), name);
  };
}

template <typename T>
TypedLaunch<T> Tiled(const std::string& name, int tile, bool padded) {
  return [=](const Problem& p, const T* a, const T* b, T* c, const Buffers&,
             const LaunchContext& ctx) {
    return FromCuda(cuda::LaunchTiledMatMul<T>(a, b, c, p.m, p.n, p.k, tile, padded, StreamOf(ctx)),
                    name);
  };
}

template <typename T>
TypedLaunch<T> RegisterTiled(const std::string& name) {
  return [name](const Problem& p, const T* a, const T* b, T* c, const Buffers&,
                const LaunchContext& ctx) {
    return FromCuda(cuda::LaunchRegisterTiledMatMul<T>(a, b, c, p.m, p.n, p.k, StreamOf(ctx)),
                    name);
  };
}

template <typename T>
TypedLaunch<T> CublasGemm(const std::string& name, bool tf32) {
  return [=](const Problem& p, const T* a, const T* b, T* c, const Buffers& buf,
             const LaunchContext& ctx) {
    int status = 0;
    absl::Status s = FromCuda(
        cuda::LaunchCublasMatMul<T>(a, b, c, p.m, p.n, p.k, tf32, ctx.cublas, buf.workspace,
                                    buf.workspace_bytes, StreamOf(ctx), &status),
        name);
    return s.ok() ? FromCublas(status, name) : s;
  };
}

size_t CublasWorkspace(const Problem&) { return cuda::kCublasWorkspaceBytes; }

void RegisterMatMul(Registry& r) {
  auto add = [&r](std::string name, std::string description, bool with_double,
                  bool reduced_precision, std::function<size_t(const Problem&)> workspace,
                  TypedLaunch<float> f, TypedLaunch<double> d) {
    (void)r.Add(MakeVariant(Op::kMatMul, std::move(name), std::move(description), with_double,
                            reduced_precision, std::move(workspace), std::move(f), std::move(d)));
  };
  add("naive", "one thread per output element, A and B read from global memory", true, false,
      nullptr, Naive<float>("naive"), Naive<double>("naive"));
  add("tiled16", "16x16 shared-memory tiles of A and B, one output element per thread", true,
      false, nullptr, Tiled<float>("tiled16", 16, false), Tiled<double>("tiled16", 16, false));
  add("tiled32", "32x32 shared-memory tiles of A and B, one output element per thread", true,
      false, nullptr, Tiled<float>("tiled32", 32, false), Tiled<double>("tiled32", 32, false));
  add("tiled32_padded", "32x33 padded shared-memory tiles, one output element per thread", true,
      false, nullptr, Tiled<float>("tiled32_padded", 32, true),
      Tiled<double>("tiled32_padded", 32, true));
  add("register_tiled",
      "128x128 block tile, 8x8 register tile per thread, 64x32 warp tiles, 16-byte loads, "
      "transposed conflict-free A staging, double-buffered shared memory with register "
      "prefetch",
      true, false, nullptr, RegisterTiled<float>("register_tiled"),
      RegisterTiled<double>("register_tiled"));
  add("cublas", "cuBLAS GEMM: FP32 without TF32, FP64 DGEMM", true, false, CublasWorkspace,
      CublasGemm<float>("cublas", false), CublasGemm<double>("cublas", false));
  add("cublas_tf32", "cuBLAS GEMM on TF32 tensor cores (reduced precision)", false, true,
      CublasWorkspace, CublasGemm<float>("cublas_tf32", true), nullptr);
}

// ---- Transpose ----

template <typename T>
TypedLaunch<T> Transpose(const std::string& name, TransposeKind kind) {
  return [=](const Problem& p, const T* a, const T*, T* out, const Buffers&,
             const LaunchContext& ctx) {
    return FromCuda(cuda::LaunchTranspose<T>(a, out, p.m, p.n, kind, StreamOf(ctx)), name);
  };
}

template <typename T>
TypedLaunch<T> CublasTranspose(const std::string& name) {
  return [=](const Problem& p, const T* a, const T*, T* out, const Buffers&,
             const LaunchContext& ctx) {
    int status = 0;
    absl::Status s = FromCuda(
        cuda::LaunchCublasTranspose<T>(a, out, p.m, p.n, ctx.cublas, StreamOf(ctx), &status),
        name);
    return s.ok() ? FromCublas(status, name) : s;
  };
}

void RegisterTranspose(Registry& r) {
  auto add = [&r](std::string name, std::string description, TypedLaunch<float> f,
                  TypedLaunch<double> d) {
    (void)r.Add(MakeVariant(Op::kTranspose, std::move(name), std::move(description), true, false,
                            nullptr, std::move(f), std::move(d)));
  };
  auto kernel = [&add](const std::string& name, const std::string& description,
                       TransposeKind kind) {
    add(name, description, Transpose<float>(name, kind), Transpose<double>(name, kind));
  };
  kernel("naive", "one element per thread: coalesced reads, strided writes", TransposeKind::kNaive);
  kernel("shared", "32x32 shared-memory tile; column reads hit one bank (conflicts)",
         TransposeKind::kShared);
  kernel("shared_padded", "32x33 padded shared-memory tile, conflict-free",
         TransposeKind::kSharedPadded);
  kernel("shared_swizzled", "32x32 shared-memory tile with XOR-swizzled columns, no padding",
         TransposeKind::kSharedSwizzled);
  add("cublas", "cublas<t>geam with op(A) = A^T", CublasTranspose<float>("cublas"),
      CublasTranspose<double>("cublas"));
  kernel("shared_padded_vec16",
         "64x65 padded tile, 16-byte global loads and stores, conflict-free shared access "
         "(shapes not divisible into 16-byte vectors use shared_padded)",
         TransposeKind::kTile64Vec16);
  kernel("shared_padded_wide",
         "64x65 padded shared-memory tile, 16 elements per thread: each row is read and written "
         "in 256-byte runs",
         TransposeKind::kSharedPaddedWide);
}

// ---- Reduce ----

template <typename T>
TypedLaunch<T> Tree(const std::string& name, bool sequential) {
  return [=](const Problem& p, const T* a, const T*, T* out, const Buffers& buf,
             const LaunchContext& ctx) {
    return FromCuda(cuda::LaunchTreeReduce<T>(a, out, p, sequential, buf.workspace,
                                              buf.workspace_bytes, StreamOf(ctx)),
                    name);
  };
}

template <typename T>
TypedLaunch<T> WarpShuffle(const std::string& name) {
  return [=](const Problem& p, const T* a, const T*, T* out, const Buffers& buf,
             const LaunchContext& ctx) {
    return FromCuda(cuda::LaunchWarpShuffleReduce<T>(a, out, p, buf.workspace,
                                                     buf.workspace_bytes, StreamOf(ctx)),
                    name);
  };
}

template <typename T>
TypedLaunch<T> Cub(const std::string& name) {
  return [=](const Problem& p, const T* a, const T*, T* out, const Buffers& buf,
             const LaunchContext& ctx) {
    return FromCuda(
        cuda::LaunchCubReduce<T>(a, out, p, buf.workspace, buf.workspace_bytes, StreamOf(ctx)),
        name);
  };
}

void RegisterReduce(Registry& r) {
  auto add = [&r](std::string name, std::string description,
                  std::function<size_t(const Problem&)> workspace, TypedLaunch<float> f,
                  TypedLaunch<double> d) {
    (void)r.Add(MakeVariant(Op::kReduce, std::move(name), std::move(description), true, false,
                            std::move(workspace), std::move(f), std::move(d)));
  };
  add("interleaved",
      "shared-memory tree with interleaved (divergent) addressing, one element per thread, "
      "repeated passes",
      [](const Problem& p) { return cuda::TreeReduceWorkspaceBytes(p, false); },
      Tree<float>("interleaved", false), Tree<double>("interleaved", false));
  add("sequential",
      "shared-memory tree with sequential addressing, two elements per thread, repeated passes",
      [](const Problem& p) { return cuda::TreeReduceWorkspaceBytes(p, true); },
      Tree<float>("sequential", true), Tree<double>("sequential", true));
  add("warp_shuffle",
      "16-byte loads with four in flight per thread, warp shuffles, deterministic final pass",
      cuda::WarpShuffleReduceWorkspaceBytes, WarpShuffle<float>("warp_shuffle"),
      WarpShuffle<double>("warp_shuffle"));
  add("cub",
      "cub::DeviceReduce (ALL), cub::DeviceSegmentedReduce (PER_ROW); PER_COLUMN uses the "
      "coalesced warp_shuffle column kernel",
      cuda::CubReduceWorkspaceBytes, Cub<float>("cub"), Cub<double>("cub"));
}

}  // namespace

void RegisterCudaVariants(Registry& registry) {
  RegisterMatMul(registry);
  RegisterTranspose(registry);
  RegisterReduce(registry);
}

bool BuiltWithCuda() { return true; }

}  // namespace gpucompute::kernels
