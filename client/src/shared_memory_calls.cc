// A Client's shared-memory calls: regions registered and listed, tensors moved through views.
#include <utility>

#include "absl/strings/str_cat.h"
#include "client_core.h"
#include "gpucompute/client.h"

namespace gpucompute {

absl::StatusOr<Tensor> Client::Upload(const SharedMemoryView& view,
                                      const UploadOptions& options) const {
  v1::UploadRequest first;
  first.set_dtype(ToProto(view.dtype));
  first.set_rows(view.rows);
  first.set_cols(view.cols);
  first.set_ttl_seconds(options.ttl_seconds);
  v1::SharedMemorySlice* slice = first.mutable_shared_memory();
  slice->set_region(view.region);
  slice->set_offset(view.offset);
  slice->set_byte_size(view.byte_size());
  v1::TensorInfo info;
  grpc::ClientContext context;
  Prepare(&context);
  auto writer = stub_->Upload(&context, &info);  // the first replica's, where regions are
  writer->Write(first);                          // when refused, Finish says why
  writer->WritesDone();
  if (absl::Status st = Finish("Upload", writer->Finish()); !st.ok()) return st;
  replicas_->Learn(info.server(), 0);
  return Tensor(core_, std::move(info), view.dtype);
}

absl::Status Client::Download(const std::string& id, const SharedMemoryView& into,
                              bool release) const {
  v1::DownloadRequest request;
  request.set_tensor_id(id);
  request.set_release(release);
  v1::SharedMemorySlice* slice = request.mutable_shared_memory();
  slice->set_region(into.region);
  slice->set_offset(into.offset);
  slice->set_byte_size(into.byte_size());
  const internal::ClientCore& core = *(*replicas_)[Route(id)].core;
  grpc::ClientContext context;
  core.Prepare(&context);
  auto reader = core.stub->Download(&context, request);
  v1::DownloadResponse response;
  v1::TensorInfo info;
  bool first = true;
  while (reader->Read(&response)) {
    if (first) info = response.info();
    first = false;
  }
  if (absl::Status st = core.Finish("Download", reader->Finish()); !st.ok()) return st;
  // The server checked the byte size; the shape is the client's to check.
  if (!first && (info.dtype() != ToProto(into.dtype) || info.rows() != into.rows ||
                 info.cols() != into.cols)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Download failed: tensor ", id, " is ", info.rows(), "x", info.cols(), " ",
                     v1::DType_Name(info.dtype()), " but the view is ", into.rows, "x", into.cols,
                     " ", DTypeName(into.dtype), " (its bytes were written into it)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::SharedMemoryRegion> Client::RegisterSharedMemory(
    const v1::RegisterSharedMemoryRequest& request) const {
  v1::SharedMemoryRegion region;
  grpc::ClientContext context;
  Prepare(&context);
  if (absl::Status st =
          Finish("RegisterSharedMemory", stub_->RegisterSharedMemory(&context, request, &region));
      !st.ok()) {
    return st;
  }
  return region;
}

absl::StatusOr<int64_t> Client::UnregisterSharedMemory(const std::string& name) const {
  v1::UnregisterSharedMemoryRequest request;
  request.set_name(name);
  v1::UnregisterSharedMemoryResponse response;
  grpc::ClientContext context;
  Prepare(&context);
  if (absl::Status st = Finish("UnregisterSharedMemory",
                               stub_->UnregisterSharedMemory(&context, request, &response));
      !st.ok()) {
    return st;
  }
  return response.unregistered();
}

absl::StatusOr<v1::ListSharedMemoryResponse> Client::ListSharedMemory() const {
  v1::ListSharedMemoryResponse response;
  grpc::ClientContext context;
  Prepare(&context);
  if (absl::Status st =
          Finish("ListSharedMemory", stub_->ListSharedMemory(&context, {}, &response));
      !st.ok()) {
    return st;
  }
  return response;
}

}  // namespace gpucompute
