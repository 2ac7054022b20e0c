// Upload: the first message gives the shape (and the first bytes); the
// tensor is made at once, charging the budget before any byte is stored.
// Messages are gathered to kUploadWriteBytes and each batch is written to
// the device in order, while the next batch is read from the network: at
// most one write and one read are in flight, so the host holds at most two
// batches (plus a message). A stream that ends short, runs long, fails or is
// cancelled holds nothing: the unlisted tensor frees itself with the reactor.
// Messages are read as raw bytes and parsed in place (proto/wire): a chunk
// goes from the transport's buffers to the tensor with no copy in between.
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <grpcpp/impl/codegen/proto_utils.h>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/grpc/call_record.h"
#include "server/grpc/convert.h"
#include "server/grpc/rpc_ops.h"
#include "server/grpc/tensor_requests.h"
#include "server/grpc/tensor_streams.h"

namespace gpucompute::server {
namespace {

// Looked up once: a stream's op label, not a hash lookup per call.
const RpcOp& UploadOp() {
  static const RpcOp op = RpcOpFor("Upload");
  return op;
}

// One UploadRequest as received: the transport's slices and the fields
// parsed from them (its data pieces point into the slices).
struct Message {
  std::vector<grpc::Slice> slices;
  wire::UploadRequest fields;
};
using Batch = std::vector<std::unique_ptr<Message>>;

class UploadReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  UploadReactor(grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response,
                TensorTransfers* transfers, const StreamContext& call)
      : response_(response),
        transfers_(transfers),
        regions_(call.regions),
        record_(ctx, call.metrics, UploadOp(), call.calls) {}

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
    std::unique_ptr<Message> message;
    absl::Status parsed;
    if (ok) {
      message = std::make_unique<Message>();
      // Parsed where the slices now live: the data pieces point into them.
      if (!incoming_.Dump(&message->slices).ok()) {
        parsed = absl::InvalidArgumentError("Upload: a message could not be read");
      } else if (auto fields = wire::ParseUploadRequest(message->slices); fields.ok()) {
        message->fields = std::move(*fields);
      } else {
        parsed = fields.status();
      }
      incoming_.Clear();
    }
    std::unique_ptr<Message> first;
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
      if (!ok) {
        ended_ = true;
        // Cancelled: nothing more is written; End reports the cancellation.
        if (record_.cancelled()->load()) FailLocked(absl::CancelledError("upload cancelled"));
      } else if (!parsed.ok()) {
        FailLocked(absl::InvalidArgumentError(
            absl::StrCat("Upload message ", messages_ + 1, ": ", parsed.message())));
      } else if (!tensor_ && !creating_ && status_.ok()) {
        first = std::move(message);
      } else if (status_.ok()) {
        TakeLocked(std::move(message));
      }
    }
    if (first) Begin(std::move(first));
    Pump([] {});
  }

 private:
  // The first message: its shape makes the tensor, its data are the first bytes.
  void Begin(std::unique_ptr<Message> first) {
    const wire::UploadRequest& f = first->fields;
    absl::Status invalid;
    auto shape = UploadShape(f);
    auto ttl =
        TtlOf(f.ttl_seconds, "ttl_seconds", transfers_ != nullptr ? &transfers_->store() : nullptr);
    std::optional<RegionSlice> slice;
    if (f.has_shared_memory && f.data_bytes > 0) {
      invalid = absl::InvalidArgumentError(
          "Upload: the first message sets both data and shared_memory; the payload comes one "
          "way");
    } else if (f.has_shared_memory && regions_ == nullptr) {
      invalid = SharedMemoryOff("shared_memory");
    } else if (!shape.ok()) {
      invalid = shape.status();
    } else if (!ttl.ok()) {
      invalid = ttl.status();
    } else if (transfers_ == nullptr) {
      invalid = absl::FailedPreconditionError("this server holds no tensors");
    } else if (f.has_shared_memory) {
      auto resolved = ResolveSlice(f.shared_memory, shape->bytes(), "shared_memory", regions_);
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
      gathered_bytes_ += f.data_bytes;
      gathered_.push_back(std::move(first));
    }
    // creating_ stays set until the callback's own Pump clears it: until
    // then no other thread can finish the call and free this reactor.
    transfers_->Create(*shape, record_.deadline(),
                       [this](absl::StatusOr<std::shared_ptr<Tensor>> tensor) {
                         bool from_region = false;
                         {
                           absl::MutexLock lock(&mu_);
                           if (tensor.ok()) {
                             tensor_ = std::move(*tensor);
                             from_region = slice_.has_value();
                             writing_ = from_region;
                           } else {
                             FailLocked(tensor.status());
                           }
                         }
                         if (from_region) WriteFromRegion();
                         Pump([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { creating_ = false; });
                       });
  }

  // A later message: data only.
  void TakeLocked(std::unique_ptr<Message> message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++messages_;
    const wire::UploadRequest& f = message->fields;
    if (f.dtype != 0 || f.rows != 0 || f.cols != 0 || f.ttl_seconds != 0 || f.has_shared_memory) {
      FailLocked(absl::InvalidArgumentError(
          absl::StrCat("Upload message ", messages_,
                       ": only the first message gives dtype, rows, cols, "
                       "ttl_seconds or shared_memory; later ones carry data only")));
      return;
    }
    if (!AcceptLocked(*message) || f.data_bytes == 0) return;
    gathered_bytes_ += f.data_bytes;
    gathered_.push_back(std::move(message));
  }

  // Counts a message's bytes; false (and the call fails) past the total.
  bool AcceptLocked(const Message& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int64_t size = message.fields.data_bytes;
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
  //
  // The reactor is freed once the call is finished, so whatever still has a
  // use for it keeps the call from finishing: a transfer in flight by its
  // flag, which its callback clears in `settle`, under the same lock as the
  // decision (cleared first, another thread could finish the call before
  // this Pump ran); and a Pump between its decision and the write or read it
  // starts by `acting_`, after which it decides again.
  void Pump(absl::FunctionRef<void()> settle) {
    bool read = false, acting = false, finish = false;
    Batch write;
    int64_t offset = 0;
    absl::Status status;
    {
      absl::MutexLock lock(&mu_);
      settle();
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
      acting = read || !write.empty();
      if (acting) {
        ++acting_;
        finish = false;
      } else if (acting_ > 0) {
        finish = false;  // the acting Pump decides again when it is done
      }
      if (finish) {
        finished_ = true;
        status = status_;
      }
    }
    if (acting) {
      if (!write.empty()) Write(std::move(write), offset);
      if (read) StartRead(&incoming_);
      Pump([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { --acting_; });
      return;
    }
    if (!finish) return;
    if (status.ok()) {
      std::shared_ptr<Tensor> tensor;
      {
        absl::MutexLock lock(&mu_);
        tensor = std::move(tensor_);
      }
      v1::TensorInfo info;
      ToProto(transfers_->store().Add(std::move(tensor), ttl_), &info);
      bool own_buffer = false;
      if (!grpc::SerializationTraits<v1::TensorInfo>::Serialize(info, response_, &own_buffer)
               .ok()) {
        status = absl::InternalError("Upload: the TensorInfo could not be serialized");
      }
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
                                  Pump([this, &s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                                    writing_ = false;
                                    if (!s.ok()) FailLocked(s);
                                  });
                                });
  }

  void Write(Batch batch, int64_t offset) {
    HostPieces pieces;
    for (const auto& m : batch) {
      pieces.insert(pieces.end(), m->fields.data.begin(), m->fields.data.end());
    }
    std::shared_ptr<Tensor> tensor;
    {
      absl::MutexLock lock(&mu_);
      tensor = tensor_;
    }
    // The batch stays alive until the write is done: the pieces point into it.
    auto owned = std::make_shared<Batch>(std::move(batch));
    transfers_->Write(std::move(tensor), offset, std::move(pieces), [this, owned](absl::Status s) {
      owned->clear();
      Pump([this, &s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        writing_ = false;
        if (!s.ok()) FailLocked(s);
      });
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

  grpc::ByteBuffer* const response_;
  TensorTransfers* const transfers_;
  const SharedMemoryRegistry* const regions_;
  CallRecord record_;
  // The payload's slice of a shared-memory region; set once, by the first
  // message, before the tensor is made.
  std::optional<RegionSlice> slice_;
  grpc::ByteBuffer incoming_;  // the read in flight lands here

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
  int acting_ ABSL_GUARDED_BY(mu_) = 0;  // Pumps starting a write or a read
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerReadReactor<grpc::ByteBuffer>* StartUpload(grpc::CallbackServerContext* ctx,
                                                       grpc::ByteBuffer* response,
                                                       TensorTransfers* transfers,
                                                       const StreamContext& call) {
  auto* reactor = new UploadReactor(ctx, response, transfers, call);
  reactor->Start();
  return reactor;
}

grpc::ServerReadReactor<grpc::ByteBuffer>* RefuseUpload(grpc::CallbackServerContext* ctx,
                                                        absl::Status status,
                                                        const StreamContext& call) {
  auto* reactor = new UploadReactor(ctx, nullptr, nullptr, call);
  reactor->Refuse(std::move(status));
  return reactor;
}

}  // namespace gpucompute::server
