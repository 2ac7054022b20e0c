// Upload: the first message gives the shape (and the first bytes); the
// tensor is made at once, charging the budget before any byte is stored;
// later messages' bytes are gathered to kUploadWriteBytes and written to the
// device in order, the next message read only once the write is done (the
// transport keeps receiving meanwhile, up to its flow-control window). A
// stream that ends short, runs long, fails or is cancelled holds nothing:
// the unlisted tensor frees itself with the reactor.
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/grpc/call_record.h"
#include "server/grpc/convert.h"
#include "server/grpc/tensor_requests.h"
#include "server/grpc/tensor_streams.h"

namespace gpucompute::server {
namespace {

class UploadReactor final : public grpc::ServerReadReactor<v1::UploadRequest> {
 public:
  UploadReactor(grpc::CallbackServerContext* ctx, v1::TensorInfo* response,
                TensorTransfers* transfers, const StreamContext& call)
      : response_(response),
        transfers_(transfers),
        record_(ctx, call.metrics, RpcOp::kUpload, call.calls_started, call.calls_in_flight) {}

  void Start() { ReadNext(); }
  void Refuse(absl::Status status) { Complete(std::move(status)); }

  void OnCancel() override { record_.Cancel(); }
  void OnDone() override { delete this; }

  void OnReadDone(bool ok) override {
    if (!ok) {
      EndOfStream();
      return;
    }
    std::unique_ptr<v1::UploadRequest> message = std::move(incoming_);
    if (first_) {
      first_ = false;
      Begin(std::move(message));
    } else {
      if (message->dtype() != 0 || message->rows() != 0 || message->cols() != 0 ||
          message->ttl_seconds() != 0 || message->has_shared_memory()) {
        Complete(absl::InvalidArgumentError(absl::StrCat(
            "Upload message ", messages_, ": only the first message gives dtype, rows, cols, "
            "ttl_seconds or shared_memory; later ones carry data only")));
        return;
      }
      Accept(std::move(message));
    }
  }

 private:
  void ReadNext() {
    incoming_ = std::make_unique<v1::UploadRequest>();
    StartRead(incoming_.get());
  }

  // The first message: its shape makes the tensor, its data are the first bytes.
  void Begin(std::unique_ptr<v1::UploadRequest> first) {
    if (first->has_shared_memory()) {
      Complete(!first->data().empty()
                   ? absl::InvalidArgumentError(
                         "Upload: the first message sets both data and shared_memory; the "
                         "payload comes one way")
                   : SharedMemoryOff("shared_memory"));
      return;
    }
    auto shape = UploadShape(*first);
    if (!shape.ok()) {
      Complete(shape.status());
      return;
    }
    auto ttl = TtlOf(first->ttl_seconds(), "ttl_seconds");
    if (!ttl.ok()) {
      Complete(ttl.status());
      return;
    }
    if (transfers_ == nullptr) {
      Complete(absl::FailedPreconditionError("this server holds no tensors"));
      return;
    }
    shape_ = *shape;
    ttl_ = *ttl;
    incoming_ = std::move(first);  // its bytes are taken once the tensor exists
    transfers_->Create(*shape, record_.deadline(),
                       [this](absl::StatusOr<std::shared_ptr<Tensor>> tensor) {
                         if (!tensor.ok()) {
                           Complete(tensor.status());
                           return;
                         }
                         tensor_ = std::move(*tensor);
                         Accept(std::move(incoming_));
                       });
  }

  // Takes a message's bytes; writes what is gathered once it is enough.
  void Accept(std::unique_ptr<v1::UploadRequest> message) {
    ++messages_;
    const int64_t size = int64_t(message->data().size());
    if (size > shape_.bytes() - received_) {
      Complete(TotalMismatch(received_ + size, "more than"));
      return;
    }
    received_ += size;
    if (size > 0) {
      gathered_bytes_ += size;
      gathered_.push_back(std::move(message));
    }
    if (gathered_bytes_ >= kUploadWriteBytes) {
      Write([this] { ReadNext(); });
    } else {
      ReadNext();
    }
  }

  // Writes the gathered bytes at their offset, then runs `next`.
  template <typename Next>
  void Write(Next next) {
    HostPieces pieces;
    for (const auto& m : gathered_) pieces.emplace_back(m->data().data(), m->data().size());
    const int64_t offset = written_;
    written_ += gathered_bytes_;
    transfers_->Write(tensor_, offset, std::move(pieces), [this, next](absl::Status s) {
      gathered_.clear();
      gathered_bytes_ = 0;
      if (!s.ok()) {
        Complete(s);
        return;
      }
      next();
    });
  }

  // The client half-closed (or the call broke: then End reports that).
  void EndOfStream() {
    if (record_.cancelled()->load()) {
      Complete(absl::CancelledError("upload cancelled"));
      return;
    }
    if (first_) {
      Complete(absl::InvalidArgumentError(
          "Upload: the stream ended before its first message (dtype, rows, cols)"));
      return;
    }
    if (received_ != shape_.bytes()) {
      Complete(TotalMismatch(received_, "only"));
      return;
    }
    Write([this] {
      ToProto(transfers_->store().Add(std::move(tensor_), ttl_), response_);
      Complete(absl::OkStatus());
    });
  }

  absl::Status TotalMismatch(int64_t got, const char* how) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "data: the Upload's bytes total ", how, " ", got, " by message ", messages_, ", but a ",
        shape_.rows, " x ", shape_.cols, " ", ProtoDTypeName(ToProto(shape_.dtype)),
        " tensor is ", shape_.bytes(), " bytes (rows * cols * ",
        kernels::ElementSize(shape_.dtype), ")"));
  }

  // Answers once; an unlisted tensor goes with the reactor.
  void Complete(absl::Status status) { Finish(ToGrpcStatus(record_.End(std::move(status)))); }

  v1::TensorInfo* const response_;
  TensorTransfers* const transfers_;
  CallRecord record_;
  std::unique_ptr<v1::UploadRequest> incoming_;
  bool first_ = true;
  int64_t messages_ = 0;  // accepted so far
  TensorShape shape_;
  absl::Duration ttl_;
  std::shared_ptr<Tensor> tensor_;
  std::vector<std::unique_ptr<v1::UploadRequest>> gathered_;  // not yet written
  int64_t gathered_bytes_ = 0;
  int64_t received_ = 0;  // bytes accepted
  int64_t written_ = 0;   // bytes handed to writes
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
