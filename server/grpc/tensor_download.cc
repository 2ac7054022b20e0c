// Download: the tensor's bytes leave in messages of chunk_bytes, read from
// the device into one of two message buffers while the other is being sent,
// so the device copy overlaps the network. The first message carries the
// TensorInfo. With `release`, the tensor is released once the last message
// has gone out.
#include <algorithm>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/grpc/call_record.h"
#include "server/grpc/tensor_requests.h"
#include "server/grpc/tensor_streams.h"

namespace gpucompute::server {
namespace {

class DownloadReactor final : public grpc::ServerWriteReactor<v1::DownloadResponse> {
 public:
  DownloadReactor(grpc::CallbackServerContext* ctx, TensorTransfers* transfers,
                  const StreamContext& call)
      : transfers_(transfers),
        regions_(call.regions),
        record_(ctx, call.metrics, RpcOp::kDownload, call.calls_started, call.calls_in_flight) {}

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
    ToProto(transfers_->store().InfoOf(*tensor_), buffers_[0].mutable_info());
    if (request.has_shared_memory()) return StartToRegion(request.shared_memory());
    free_ = {0, 1};
    Pump();
  }

  void OnCancel() override { record_.Cancel(); }
  void OnDone() override { delete this; }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      const int b = ready_.front();
      ready_.pop_front();
      buffers_[b].Clear();
      free_.push_back(b);
      if (!ok && status_.ok()) status_ = absl::CancelledError("download cancelled");
    }
    Pump();
  }

 private:
  // Decides the next steps under the lock and takes them outside it: read
  // the next chunk into a free buffer, send a filled one, or finish once
  // nothing is in flight.
  void Pump() {
    int read_into = -1, write_from = -1;
    int64_t offset = 0, length = 0;
    bool finish = false;
    absl::Status status;
    {
      absl::MutexLock lock(&mu_);
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
    if (write_from >= 0) StartWrite(&buffers_[write_from]);
    if (finish) End(status);
  }

  // The payload goes into a shared-memory slice in one transfer (DMA when
  // the region is pinned); then one message carries the TensorInfo alone.
  void StartToRegion(const v1::SharedMemorySlice& s) {
    auto slice = ResolveSlice(wire::SharedMemorySlice{s.region(), s.offset(), s.byte_size()},
                              tensor_->bytes(), "shared_memory", regions_);
    if (!slice.ok()) return Refuse(slice.status());
    {
      absl::MutexLock lock(&mu_);
      next_offset_ = tensor_->bytes();  // nothing to stream
      reading_ = true;
    }
    transfers_->ReadToRegion(tensor_, slice->region, slice->offset, [this](absl::Status s) {
      {
        absl::MutexLock lock(&mu_);
        reading_ = false;
        if (s.ok()) {
          ready_.push_back(0);
        } else if (status_.ok()) {
          status_ = s;
        }
      }
      Pump();
    });
  }

  void Read(int b, int64_t offset, int64_t length) {
    std::string* data = buffers_[b].mutable_data();
    data->resize(size_t(length));
    transfers_->Read(tensor_, offset, length, data->data(), [this, b](absl::Status s) {
      {
        absl::MutexLock lock(&mu_);
        reading_ = false;
        if (s.ok()) {
          ready_.push_back(b);
        } else if (status_.ok()) {
          status_ = s;
        }
      }
      Pump();
    });
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
  CallRecord record_;
  std::shared_ptr<Tensor> tensor_;
  bool release_ = false;
  int64_t chunk_ = 0;
  v1::DownloadResponse buffers_[2];
  absl::Mutex mu_;
  std::deque<int> free_ ABSL_GUARDED_BY(mu_);
  std::deque<int> ready_ ABSL_GUARDED_BY(mu_);  // filled, in payload order; front is being sent
  int64_t next_offset_ ABSL_GUARDED_BY(mu_) = 0;
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerWriteReactor<v1::DownloadResponse>* StartDownload(grpc::CallbackServerContext* ctx,
                                                              const v1::DownloadRequest& request,
                                                              TensorTransfers* transfers,
                                                              const StreamContext& call) {
  auto* reactor = new DownloadReactor(ctx, transfers, call);
  reactor->Start(request);
  return reactor;
}

grpc::ServerWriteReactor<v1::DownloadResponse>* RefuseDownload(grpc::CallbackServerContext* ctx,
                                                               absl::Status status,
                                                               const StreamContext& call) {
  auto* reactor = new DownloadReactor(ctx, nullptr, call);
  reactor->Refuse(std::move(status));
  return reactor;
}

}  // namespace gpucompute::server
