// Upload: the first message gives the shape (and the first bytes); the
// tensor is made at once, charging the budget before any byte is stored.
// Messages are gathered to kUploadWriteBytes and each batch is written to
// the device in order, while the next batch is read from the network: at
// most one write and one read are in flight, so the host holds at most two
// batches (plus a message). A stream that ends short, runs long, fails or is
// cancelled holds nothing: the unlisted tensor frees itself with the reactor.
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/grpc/call_record.h"
#include "server/grpc/convert.h"
#include "server/grpc/tensor_requests.h"
#include "server/grpc/tensor_streams.h"

namespace gpucompute::server {
namespace {

using Batch = std::vector<std::unique_ptr<v1::UploadRequest>>;

class UploadReactor final : public grpc::ServerReadReactor<v1::UploadRequest> {
 public:
  UploadReactor(grpc::CallbackServerContext* ctx, v1::TensorInfo* response,
                TensorTransfers* transfers, const StreamContext& call)
      : response_(response),
        transfers_(transfers),
        regions_(call.regions),
        record_(ctx, call.metrics, RpcOp::kUpload, call.calls_started, call.calls_in_flight) {}

  void Start() {
    {
      absl::MutexLock lock(&mu_);
      reading_ = true;
    }
    StartRead(&incoming_);
  }
  void Refuse(absl::Status status) {
    {
      absl::MutexLock lock(&mu_);
      finished_ = true;
    }
    Complete(std::move(status));
  }

  void OnCancel() override { record_.Cancel(); }
  void OnDone() override { delete this; }

  void OnReadDone(bool ok) override {
    std::unique_ptr<v1::UploadRequest> first;
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
      if (!ok) {
        ended_ = true;
        // Cancelled: nothing more is written; End reports the cancellation.
        if (record_.cancelled()->load()) FailLocked(absl::CancelledError("upload cancelled"));
      } else if (!tensor_ && !creating_ && status_.ok()) {
        first = std::make_unique<v1::UploadRequest>(std::move(incoming_));
      } else if (status_.ok()) {
        TakeLocked(std::make_unique<v1::UploadRequest>(std::move(incoming_)));
      }
    }
    if (first) Begin(std::move(first));
    Pump();
  }

 private:
  // The first message: its shape makes the tensor, its data are the first bytes.
  void Begin(std::unique_ptr<v1::UploadRequest> first) {
    absl::Status invalid;
    auto shape = UploadShape(*first);
    auto ttl = TtlOf(first->ttl_seconds(), "ttl_seconds");
    std::optional<RegionSlice> slice;
    if (first->has_shared_memory() && !first->data().empty()) {
      invalid = absl::InvalidArgumentError(
          "Upload: the first message sets both data and shared_memory; the payload comes one "
          "way");
    } else if (first->has_shared_memory() && regions_ == nullptr) {
      invalid = SharedMemoryOff("shared_memory");
    } else if (!shape.ok()) {
      invalid = shape.status();
    } else if (!ttl.ok()) {
      invalid = ttl.status();
    } else if (transfers_ == nullptr) {
      invalid = absl::FailedPreconditionError("this server holds no tensors");
    } else if (first->has_shared_memory()) {
      const v1::SharedMemorySlice& s = first->shared_memory();
      auto resolved = ResolveSlice(s, shape->bytes(), "shared_memory", regions_);
      if (resolved.ok()) {
        slice = std::move(*resolved);
      } else {
        invalid = resolved.status();
      }
    }
    absl::MutexLock lock(&mu_);
    if (!invalid.ok()) {
      FailLocked(invalid);
      return;
    }
    shape_ = *shape;
    ttl_ = *ttl;
    ++messages_;
    if (slice) {
      // The whole payload is in the region: no more bytes may come, and the
      // one write starts once the tensor exists.
      slice_ = std::move(slice);
      received_ = shape_.bytes();
    } else if (!AcceptLocked(*first)) {
      return;
    }
    creating_ = true;
    if (!slice_) {
      gathered_bytes_ += int64_t(first->data().size());
      gathered_.push_back(std::move(first));
    }
    transfers_->Create(*shape, record_.deadline(),
                       [this](absl::StatusOr<std::shared_ptr<Tensor>> tensor) {
                         bool from_region = false;
                         {
                           absl::MutexLock lock(&mu_);
                           creating_ = false;
                           if (tensor.ok()) {
                             tensor_ = std::move(*tensor);
                             from_region = slice_.has_value();
                             writing_ = from_region;
                           } else {
                             FailLocked(tensor.status());
                           }
                         }
                         if (from_region) WriteFromRegion();
                         Pump();
                       });
  }

  // A later message: data only.
  void TakeLocked(std::unique_ptr<v1::UploadRequest> message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++messages_;
    if (message->dtype() != 0 || message->rows() != 0 || message->cols() != 0 ||
        message->ttl_seconds() != 0 || message->has_shared_memory()) {
      FailLocked(absl::InvalidArgumentError(
          absl::StrCat("Upload message ", messages_,
                       ": only the first message gives dtype, rows, cols, "
                       "ttl_seconds or shared_memory; later ones carry data only")));
      return;
    }
    if (!AcceptLocked(*message) || message->data().empty()) return;
    gathered_bytes_ += int64_t(message->data().size());
    gathered_.push_back(std::move(message));
  }

  // Counts a message's bytes; false (and the call fails) past the total.
  bool AcceptLocked(const v1::UploadRequest& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int64_t size = int64_t(message.data().size());
    if (size > shape_.bytes() - received_) {
      FailLocked(TotalMismatch(received_ + size, "more than"));
      return false;
    }
    received_ += size;
    return true;
  }

  void FailLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (status_.ok()) status_ = std::move(status);
  }

  // Decides the next steps under the lock and takes them outside it: write
  // a full batch (or the last one) when no write is in flight, read the next
  // message while the gathered batch has room, and finish once the stream
  // has ended (or failed) and no transfer still uses this reactor.
  void Pump() {
    bool read = false, finish = false;
    Batch write;
    int64_t offset = 0;
    absl::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      const bool busy = creating_ || writing_;
      if (status_.ok() && tensor_ && !writing_ && !gathered_.empty() &&
          (gathered_bytes_ >= kUploadWriteBytes || ended_)) {
        write.swap(gathered_);
        offset = written_;
        written_ += gathered_bytes_;
        gathered_bytes_ = 0;
        writing_ = true;
      }
      if (status_.ok() && tensor_ && !reading_ && !ended_ && gathered_bytes_ < kUploadWriteBytes) {
        reading_ = true;
        read = true;
      }
      if (status_.ok() && ended_ && !busy && !writing_ && gathered_.empty()) {
        if (!tensor_) {
          status_ = absl::InvalidArgumentError(
              "Upload: the stream ended before its first message (dtype, rows, cols)");
        } else if (received_ != shape_.bytes()) {
          status_ = TotalMismatch(received_, "only");
        } else {
          finish = true;  // every byte is on the device
        }
      }
      // A failed call answers at once unless a transfer still refers to
      // this reactor; a read in flight ends with the call.
      if (!status_.ok() && !busy && !writing_) finish = true;
      if (finish) {
        finished_ = true;
        status = status_;
      }
    }
    if (!write.empty()) Write(std::move(write), offset);
    if (read) StartRead(&incoming_);
    if (!finish) return;
    if (status.ok()) {
      std::shared_ptr<Tensor> tensor;
      {
        absl::MutexLock lock(&mu_);
        tensor = std::move(tensor_);
      }
      ToProto(transfers_->store().Add(std::move(tensor), ttl_), response_);
    }
    Complete(std::move(status));
  }

  // The shared-memory payload, in one transfer (DMA when the region is
  // pinned); `writing_` is already set.
  void WriteFromRegion() {
    std::shared_ptr<Tensor> tensor;
    {
      absl::MutexLock lock(&mu_);
      tensor = tensor_;
    }
    transfers_->WriteFromRegion(std::move(tensor), slice_->region, slice_->offset,
                                [this](absl::Status s) {
                                  {
                                    absl::MutexLock lock(&mu_);
                                    writing_ = false;
                                    if (!s.ok()) FailLocked(s);
                                  }
                                  Pump();
                                });
  }

  void Write(Batch batch, int64_t offset) {
    HostPieces pieces;
    for (const auto& m : batch) pieces.emplace_back(m->data().data(), m->data().size());
    std::shared_ptr<Tensor> tensor;
    {
      absl::MutexLock lock(&mu_);
      tensor = tensor_;
    }
    // The batch stays alive until the write is done: the pieces point into it.
    auto owned = std::make_shared<Batch>(std::move(batch));
    transfers_->Write(std::move(tensor), offset, std::move(pieces), [this, owned](absl::Status s) {
      owned->clear();
      {
        absl::MutexLock lock(&mu_);
        writing_ = false;
        if (!s.ok()) FailLocked(s);
      }
      Pump();
    });
  }

  absl::Status TotalMismatch(int64_t got, const char* how) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "data: the Upload's bytes total ", how, " ", got, " by message ", messages_, ", but a ",
        shape_.rows, " x ", shape_.cols, " ", ProtoDTypeName(ToProto(shape_.dtype)), " tensor is ",
        shape_.bytes(), " bytes (rows * cols * ", kernels::ElementSize(shape_.dtype), ")"));
  }

  // Answers once; an unlisted tensor goes with the reactor.
  void Complete(absl::Status status) { Finish(ToGrpcStatus(record_.End(std::move(status)))); }

  v1::TensorInfo* const response_;
  TensorTransfers* const transfers_;
  const SharedMemoryRegistry* const regions_;
  CallRecord record_;
  // The payload's slice of a shared-memory region; set once, by the first
  // message, before the tensor is made.
  std::optional<RegionSlice> slice_;
  v1::UploadRequest incoming_;  // the read in flight lands here

  absl::Mutex mu_;
  TensorShape shape_ ABSL_GUARDED_BY(mu_);
  absl::Duration ttl_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Tensor> tensor_ ABSL_GUARDED_BY(mu_);
  Batch gathered_ ABSL_GUARDED_BY(mu_);  // read, not yet written
  int64_t gathered_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t messages_ ABSL_GUARDED_BY(mu_) = 0;  // read so far
  int64_t received_ ABSL_GUARDED_BY(mu_) = 0;  // bytes accepted
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;   // bytes handed to writes
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool creating_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;  // the client half-closed, or the call broke
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerReadReactor<v1::UploadRequest>* StartUpload(grpc::CallbackServerContext* ctx,
                                                        v1::TensorInfo* response,
                                                        TensorTransfers* transfers,
                                                        const StreamContext& call) {
  auto* reactor = new UploadReactor(ctx, response, transfers, call);
  reactor->Start();
  return reactor;
}

grpc::ServerReadReactor<v1::UploadRequest>* RefuseUpload(grpc::CallbackServerContext* ctx,
                                                         absl::Status status,
                                                         const StreamContext& call) {
  auto* reactor = new UploadReactor(ctx, nullptr, nullptr, call);
  reactor->Refuse(std::move(status));
  return reactor;
}

}  // namespace gpucompute::server
