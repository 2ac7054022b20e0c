// Tensors held by the server: uploads, downloads, releases and the listing.
#include <algorithm>
#include <future>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include <grpcpp/support/byte_buffer.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client_core.h"
#include "gpucompute/client.h"
#include "wire/compute_wire.h"

namespace gpucompute {

Tensor::Tensor(Tensor&& other) noexcept
    : core_(std::move(other.core_)), info_(std::move(other.info_)), dtype_(other.dtype_) {
  other.info_.Clear();
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    (void)Release();
    core_ = std::move(other.core_);
    info_ = std::move(other.info_);
    dtype_ = other.dtype_;
    other.info_.Clear();
  }
  return *this;
}

Tensor::~Tensor() { (void)Release(); }

absl::StatusOr<Matrix> Tensor::Download(int64_t chunk_bytes) const {
  if (!*this || core_ == nullptr) return absl::FailedPreconditionError("Download: empty Tensor");
  return core_->Download(id(), chunk_bytes, /*release=*/false, nullptr);
}

absl::Status Tensor::Release() {
  if (!*this || core_ == nullptr) return absl::OkStatus();
  const std::string released_id = Detach();
  absl::StatusOr<v1::ReleaseTensorsResponse> r = core_->Release({released_id});
  if (!r.ok()) return r.status();
  if (r->released() == 0) {
    return absl::NotFoundError(
        absl::StrCat("ReleaseTensors: the server no longer held tensor ", released_id));
  }
  return absl::OkStatus();
}

std::string Tensor::Detach() {
  std::string id = info_.id();
  info_.Clear();
  return id;
}

absl::StatusOr<Tensor> Client::Upload(MatrixView matrix, const UploadOptions& options) const {
  if (options.chunk_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Upload: chunk_bytes must be positive, got ", options.chunk_bytes));
  }
  absl::StatusOr<int64_t> total = MatrixByteSize(matrix.dtype, matrix.rows, matrix.cols);
  if (!total.ok())
    return absl::InvalidArgumentError(absl::StrCat("Upload: ", total.status().message()));
  const int64_t chunk = std::min<int64_t>(options.chunk_bytes, max_message_bytes_ - 1024);
  const size_t replica = Route("");
  const std::shared_ptr<const internal::ClientCore>& core = (*replicas_)[replica].core;
  grpc::ClientContext context;
  core->Prepare(&context);
  // Messages are written as raw bytes: each chunk is copied once, from the
  // matrix into a buffer that gRPC sends as it is (the generated stub would
  // copy it into a message and again into the wire buffer). A buffer gRPC
  // is done with comes back for a later chunk.
  struct Spares {
    absl::Mutex mu;
    std::vector<std::unique_ptr<std::string>> buffers ABSL_GUARDED_BY(mu);
  };
  auto spares = std::make_shared<Spares>();
  auto buffer_of = [&spares](const char* data, int64_t n) {
    std::unique_ptr<std::string> buffer;
    {
      absl::MutexLock lock(&spares->mu);
      if (!spares->buffers.empty()) {
        buffer = std::move(spares->buffers.back());
        spares->buffers.pop_back();
      }
    }
    if (!buffer) buffer = std::make_unique<std::string>();
    buffer->assign(data, size_t(n));
    return wire::SliceOwning(std::move(buffer), [spares](std::unique_ptr<std::string> b) {
      absl::MutexLock lock(&spares->mu);
      spares->buffers.push_back(std::move(b));
    });
  };
  grpc::ByteBuffer response;
  const grpc::internal::RpcMethod method(
      "/gpucompute.v1.Compute/Upload", grpc::internal::RpcMethod::CLIENT_STREAMING, core->channel);
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(core->channel.get(), method,
                                                                    &context, &response));
  auto length_at = [&](int64_t at) { return std::min(chunk, *total - at); };
  auto message_at = [&](int64_t at) {
    wire::MessageWriter message;
    if (at == 0) {  // the first message: the shape, then data only
      message.VarintField(1, uint64_t(ToProto(matrix.dtype)));
      message.VarintField(2, uint64_t(matrix.rows));
      message.VarintField(3, uint64_t(matrix.cols));
      if (options.ttl_seconds != 0) message.VarintField(4, uint64_t(options.ttl_seconds));
    }
    message.SliceField(5, buffer_of(matrix.data + at, length_at(at)));
    return message.Finish();
  };
  // The next message is built (its chunk copied out of the matrix) while
  // this thread writes the current one: the synchronous API moves bytes
  // only while a thread is in Write, so building it here would stall the
  // network for as long as the copy takes.
  grpc::ByteBuffer current = message_at(0);  // at least one, even for an empty matrix
  for (int64_t at = 0;;) {
    const int64_t next_at = at + length_at(at);
    std::future<grpc::ByteBuffer> next;
    if (next_at < *total) {
      const bool large = length_at(next_at) >= internal::kHelperCopyBytes;
      next = internal::RunAside(large, [&message_at, next_at] { return message_at(next_at); });
    }
    if (!writer->Write(current) || !next.valid()) break;  // a failed stream: Finish says why
    current = next.get();
    at = next_at;
  }
  writer->WritesDone();
  if (absl::Status st = core->Finish("Upload", writer->Finish()); !st.ok()) return st;
  v1::TensorInfo info;
  if (!grpc::SerializationTraits<v1::TensorInfo>::Deserialize(&response, &info).ok() ||
      info.id().empty()) {
    return absl::InternalError("Upload failed: the server answered without a tensor id");
  }
  replicas_->Learn(info.server().empty() ? internal::InstanceOf(info.id()) : info.server(),
                   replica);
  return Tensor(core, std::move(info), matrix.dtype);
}

absl::StatusOr<Matrix> Client::Download(const std::string& id, int64_t chunk_bytes, bool release,
                                        v1::TensorInfo* info) const {
  return (*replicas_)[Route(id)].core->Download(id, chunk_bytes, release, info);
}

absl::Status Client::Download(const std::string& id, Matrix& into, int64_t chunk_bytes,
                              bool release, v1::TensorInfo* info) const {
  absl::StatusOr<Matrix> m =
      (*replicas_)[Route(id)].core->Download(id, chunk_bytes, release, info, into.ReleaseBytes());
  into = m.ok() ? std::move(*m) : Matrix();
  return m.status();
}

absl::StatusOr<v1::ReleaseTensorsResponse> Client::Release(
    const std::vector<std::string>& ids) const {
  if (replicas_->size() == 1) return core_->Release(ids);
  std::map<size_t, std::vector<std::string>> groups;  // by replica, in order
  for (const std::string& id : ids) groups[Route(id)].push_back(id);
  v1::ReleaseTensorsResponse total;
  for (const auto& [replica, group] : groups) {
    absl::StatusOr<v1::ReleaseTensorsResponse> r = (*replicas_)[replica].core->Release(group);
    if (!r.ok()) return r.status();
    total.set_released(total.released() + r->released());
    total.set_bytes_freed(total.bytes_freed() + r->bytes_freed());
  }
  return total;
}

absl::StatusOr<v1::ListTensorsResponse> Client::ListTensors() const {
  v1::ListTensorsResponse total;
  for (size_t i = 0; i < replicas_->size(); ++i) {
    const internal::ClientCore& core = *(*replicas_)[i].core;
    v1::ListTensorsResponse response;
    grpc::ClientContext context;
    core.Prepare(&context);
    if (absl::Status st = core.Finish(
            "ListTensors", core.stub->ListTensors(&context, v1::ListTensorsRequest(), &response));
        !st.ok()) {
      return st;
    }
    for (v1::TensorInfo& t : *response.mutable_tensors()) {
      replicas_->Learn(t.server(), i);
      *total.add_tensors() = std::move(t);
    }
    total.set_held_bytes(total.held_bytes() + response.held_bytes());
    total.set_limit_bytes(total.limit_bytes() + response.limit_bytes());
  }
  return total;
}

}  // namespace gpucompute
