// Download: the tensor's bytes leave in messages of chunk_bytes, read from
// the device into one of two message slots while the other is being sent,
// so the device copy overlaps the network. Messages are written as raw
// bytes: each chunk is read into a pooled buffer that the message's data
// field points at, so no chunk is copied again to serialize it. The first
// message carries the TensorInfo. With `release`, the tensor is released
// once the last message has gone out.
#include <algorithm>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/grpc/call_record.h"
#include "server/grpc/rpc_ops.h"
#include "server/grpc/tensor_requests.h"
#include "server/grpc/tensor_streams.h"
#include "wire/compute_wire.h"

namespace gpucompute::server {
namespace {

// Looked up once: a stream's op label, not a hash lookup per call.
const RpcOp& DownloadOp() {
  static const RpcOp op = RpcOpFor("Download");
  return op;
}

class DownloadReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  DownloadReactor(grpc::CallbackServerContext* ctx, TensorTransfers* transfers,
                  const StreamContext& call)
      : transfers_(transfers),
        regions_(call.regions),
        pool_(call.buffers),
        record_(ctx, call.metrics, DownloadOp(), call.calls) {}

  void Refuse(absl::Status status) { Finish(ToGrpcStatus(record_.End(std::move(status)))); }

  void Start(const v1::DownloadRequest& request) {
    if (request.has_shared_memory() && regions_ == nullptr) {
      return Refuse(SharedMemoryOff("shared_memory"));
    }
    if (request.chunk_bytes() < 0) {
      return Refuse(absl::InvalidArgumentError(absl::StrCat(
          "chunk_bytes: must be >= 0 (0: the server's default), got ", request.chunk_bytes())));
    }
    if (transfers_ == nullptr) {
      return Refuse(absl::FailedPreconditionError("this server holds no tensors"));
    }
    auto tensor = transfers_->store().Use(request.tensor_id(), "tensor_id");
    if (!tensor.ok()) return Refuse(tensor.status());
    tensor_ = std::move(*tensor);
    release_ = request.release();
    chunk_ = request.chunk_bytes() == 0 ? kDefaultDownloadChunkBytes
                                        : std::min(request.chunk_bytes(), kMaxDownloadChunkBytes);
    v1::TensorInfo info;
    ToProto(transfers_->store().InfoOf(*tensor_), &info);
    info_ = info.SerializeAsString();
    if (request.has_shared_memory()) return StartToRegion(request.shared_memory());
    free_ = {0, 1};
    Pump([] {});
  }

  void OnCancel() override { record_.Cancel(); }
  void OnDone() override { delete this; }

  void OnWriteDone(bool ok) override {
    Pump([this, ok]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      writing_ = false;
      const int b = ready_.front();
      ready_.pop_front();
      messages_[b].Clear();  // the chunk goes back to the pool once gRPC lets it go
      free_.push_back(b);
      if (!ok && status_.ok()) status_ = absl::CancelledError("download cancelled");
    });
  }

 private:
  // Decides the next steps under the lock and takes them outside it: read
  // the next chunk into a free buffer, send a filled one, or finish once
  // nothing is in flight. A read or write that ended clears its flag in
  // `settle`, under the same lock as the decision: cleared first, another
  // thread could finish the call, and free this reactor, before this Pump
  // ran.
  void Pump(absl::FunctionRef<void()> settle) {
    int read_into = -1, write_from = -1;
    int64_t offset = 0, length = 0;
    bool finish = false;
    absl::Status status;
    {
      absl::MutexLock lock(&mu_);
      settle();
      if (status_.ok() && !reading_ && next_offset_ < tensor_->bytes() && !free_.empty()) {
        read_into = free_.front();
        free_.pop_front();
        offset = next_offset_;
        length = std::min(chunk_, tensor_->bytes() - offset);
        next_offset_ += length;
        reading_ = true;
      }
      if (status_.ok() && !writing_ && !ready_.empty()) {
        write_from = ready_.front();
        writing_ = true;
      }
      const bool sent_all = next_offset_ == tensor_->bytes() && ready_.empty();
      if (!reading_ && !writing_ && !finished_ && (!status_.ok() || sent_all)) {
        finished_ = true;
        finish = true;
        status = status_;
      }
    }
    if (read_into >= 0) Read(read_into, offset, length);
    if (write_from >= 0) StartWrite(&messages_[write_from]);
    if (finish) End(status);
  }

  // The payload goes into a shared-memory slice in one transfer (DMA when
  // the region is pinned); then one message carries the TensorInfo alone.
  void StartToRegion(const v1::SharedMemorySlice& s) {
    auto slice = ResolveSlice(s, tensor_->bytes(), "shared_memory", regions_);
    if (!slice.ok()) return Refuse(slice.status());
    {
      absl::MutexLock lock(&mu_);
      next_offset_ = tensor_->bytes();  // nothing to stream
      reading_ = true;
    }
    transfers_->ReadToRegion(tensor_, slice->region, slice->offset, [this](absl::Status s) {
      Pump([this, &s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        reading_ = false;
        if (s.ok()) {
          messages_[0] = Message(nullptr);  // the TensorInfo alone
          ready_.push_back(0);
        } else if (status_.ok()) {
          status_ = s;
        }
      });
    });
  }

  void Read(int b, int64_t offset, int64_t length) {
    chunks_[b] = pool_ != nullptr ? pool_->Acquire(size_t(length))
                                  : std::make_unique<std::string>(size_t(length), '\0');
    char* into = chunks_[b]->data();
    transfers_->Read(tensor_, offset, length, into, [this, b](absl::Status s) {
      Pump([this, b, &s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        reading_ = false;
        if (s.ok()) {
          messages_[b] = Message(std::move(chunks_[b]));
          ready_.push_back(b);
        } else if (status_.ok()) {
          status_ = s;
        }
      });
    });
  }

  // A DownloadResponse: the TensorInfo (field 1) when it is the first
  // message, then `chunk` as data (field 2), pointed at, not copied.
  grpc::ByteBuffer Message(std::unique_ptr<std::string> chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    wire::MessageWriter out;
    if (!info_sent_) out.BytesField(1, info_);
    info_sent_ = true;
    if (chunk != nullptr) {
      HostBufferPool* pool = pool_;
      out.SliceField(2, wire::SliceOwning(std::move(chunk), [pool](std::unique_ptr<std::string> b) {
                       if (pool != nullptr) pool->Release(std::move(b));
                     }));
    }
    return out.Finish();
  }

  void End(absl::Status status) {
    if (status.ok()) {
      if (release_) {
        transfers_->store().Release({tensor_->id()});
      } else {
        transfers_->store().Touch(*tensor_);
      }
    }
    Finish(ToGrpcStatus(record_.End(std::move(status))));
  }

  TensorTransfers* const transfers_;
  const SharedMemoryRegistry* const regions_;
  HostBufferPool* const pool_;  // chunk buffers; null: fresh ones
  CallRecord record_;
  std::shared_ptr<Tensor> tensor_;
  bool release_ = false;
  int64_t chunk_ = 0;
  std::string info_;  // the serialized TensorInfo
  // Two message slots: a chunk being read into chunks_[b], then sent as
  // messages_[b].
  std::unique_ptr<std::string> chunks_[2];
  grpc::ByteBuffer messages_[2];
  absl::Mutex mu_;
  bool info_sent_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<int> free_ ABSL_GUARDED_BY(mu_);
  std::deque<int> ready_ ABSL_GUARDED_BY(mu_);  // filled, in payload order; front is being sent
  int64_t next_offset_ ABSL_GUARDED_BY(mu_) = 0;
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* StartDownload(grpc::CallbackServerContext* ctx,
                                                          const v1::DownloadRequest& request,
                                                          TensorTransfers* transfers,
                                                          const StreamContext& call) {
  auto* reactor = new DownloadReactor(ctx, transfers, call);
  reactor->Start(request);
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* RefuseDownload(grpc::CallbackServerContext* ctx,
                                                           absl::Status status,
                                                           const StreamContext& call) {
  auto* reactor = new DownloadReactor(ctx, nullptr, call);
  reactor->Refuse(std::move(status));
  return reactor;
}

}  // namespace gpucompute::server
