// The operands a run holds for its whole length (operands.h).
#include "loadtest/operands.h"

#include <cstdio>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpucompute::loadtest {
namespace {

// Random matrices of a run: one seed per operand, apart from the stream's.
uint64_t OperandSeed(const Workload& w, int64_t n) { return w.seed * 1000003 + n + 1; }

absl::Status UploadOperands(const Workload& w, Client& client, HeldOperands& operands) {
  operands.releaser = std::make_unique<TensorReleaser>(&client);
  operands.tensor_placement.releaser = operands.releaser.get();
  const std::vector<std::pair<int64_t, int64_t>> shapes =
      w.op == v1::OP_MATMUL ? std::vector<std::pair<int64_t, int64_t>>{{w.m, w.k}, {w.k, w.n}}
                            : std::vector<std::pair<int64_t, int64_t>>{{w.m, w.n}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto m = Matrix::Random(w.dtype, shapes[i].first, shapes[i].second, OperandSeed(w, i));
    if (!m.ok()) return m.status();
    auto t = client.Upload(*m);
    if (!t.ok()) return t.status();
    (i == 0 ? operands.tensor_placement.a : operands.tensor_placement.b) = t->id();
    operands.held.push_back(std::move(*t));
  }
  return absl::OkStatus();
}

// One region holding a, b and the output, filled once.
absl::Status FillSharedMemory(const Workload& w, Client& client, HeldOperands& operands) {
  const int64_t es = DTypeSize(w.dtype);
  const bool matmul = w.op == v1::OP_MATMUL;
  const int64_t a_bytes = (matmul ? w.m * w.k : w.m * w.n) * es;
  const int64_t b_bytes = matmul ? w.k * w.n * es : 0;
  const int64_t out_bytes = w.OutputRows() * w.OutputCols() * es;
  auto created = SharedMemoryRegion::Create(client, a_bytes + b_bytes + out_bytes);
  if (!created.ok()) {
    return absl::Status(created.status().code(),
                        absl::StrCat("--placement=shm (the server must share this host and run "
                                     "with --allow_shared_memory): ",
                                     created.status().message()));
  }
  std::optional<SharedMemoryRegion>& region = operands.region;
  region.emplace(std::move(*created));
  operands.shm_placement = {region->name(), 0, a_bytes, a_bytes + b_bytes};
  for (auto [rows, cols, offset] : {std::tuple{matmul ? w.m : w.m, matmul ? w.k : w.n, int64_t{0}},
                                    std::tuple{matmul ? w.k : int64_t{0}, w.n, a_bytes}}) {
    if (rows == 0) continue;
    auto m = Matrix::Random(w.dtype, rows, cols, OperandSeed(w, offset));
    if (!m.ok()) return m.status();
    std::memcpy(region->data() + offset, m->bytes().data(), m->bytes().size());
  }
  std::printf("placement shm: region \"%s\" of %lld bytes, %s\n", region->name().c_str(),
              static_cast<long long>(region->bytes()),
              region->pinned() ? "pinned by the server for DMA" : "not pinned (CPU server)");
  return absl::OkStatus();
}

// The matrix a stream moves; a download's is uploaded once and read back.
absl::Status HoldTransferMatrix(const Workload& w, Client& client, HeldOperands& operands) {
  auto m = Matrix::Random(w.dtype, w.m, w.n, w.seed);
  if (!m.ok()) return m.status();
  operands.transfer_matrix.emplace(std::move(*m));
  if (w.transfer == Transfer::kDownload) {
    auto t = client.Upload(*operands.transfer_matrix);
    if (!t.ok()) return t.status();
    operands.download_id = t->id();
    operands.held.push_back(std::move(*t));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status HoldOperands(const RunOptions& run, Client& client, HeldOperands& operands) {
  if (run.HasPlacement("tensor")) {
    if (absl::Status st = UploadOperands(run.workload, client, operands); !st.ok()) return st;
  }
  if (run.HasPlacement("shm")) {
    if (absl::Status st = FillSharedMemory(run.workload, client, operands); !st.ok()) return st;
  }
  if (run.transfer()) return HoldTransferMatrix(run.workload, client, operands);
  return absl::OkStatus();
}

}  // namespace gpucompute::loadtest
