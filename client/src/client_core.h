// What a Client's Tensors and SharedMemoryRegions keep: the channel and the
// call settings, usable after the Client itself is gone.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gpucompute/matrix.h"
#include "gpucompute/v1/compute.grpc.pb.h"

namespace gpucompute {

namespace internal {
struct ClientCore {
  std::string target;
  absl::Duration deadline;
  std::string authorization;  // "Bearer <token>", or empty
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Compute::Stub> stub;

  void Prepare(grpc::ClientContext* context) const {
    if (deadline != absl::InfiniteDuration()) {
      context->set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    }
    if (!authorization.empty()) context->AddMetadata("authorization", authorization);
  }

  absl::Status Finish(const char* method, const grpc::Status& status) const {
    if (status.ok()) return absl::OkStatus();
    const auto code = static_cast<absl::StatusCode>(status.error_code());
    std::string message = absl::StrCat(method, " failed: ", absl::StatusCodeToString(code), ": ",
                                       status.error_message());
    if (code == absl::StatusCode::kUnavailable) {
      absl::StrAppend(&message, " (server ", target, ")");
    } else if (code == absl::StatusCode::kDeadlineExceeded) {
      absl::StrAppend(&message, " (deadline ", absl::FormatDuration(deadline), ")");
    }
    return absl::Status(code, message);
  }

  absl::StatusOr<Matrix> Download(const std::string& id, int64_t chunk_bytes, bool release,
                                  v1::TensorInfo* info_out) const {
    v1::DownloadRequest request;
    request.set_tensor_id(id);
    request.set_chunk_bytes(chunk_bytes);
    request.set_release(release);
    grpc::ClientContext context;
    Prepare(&context);
    std::unique_ptr<grpc::ClientReader<v1::DownloadResponse>> reader =
        stub->Download(&context, request);
    v1::DownloadResponse response;
    v1::TensorInfo info;
    bool first = true;
    std::string bytes;
    while (reader->Read(&response)) {
      if (first) {
        info = response.info();
        if (info.bytes() > 0) bytes.reserve(size_t(info.bytes()));
        first = false;
      }
      bytes.append(response.data());
    }
    if (absl::Status st = Finish("Download", reader->Finish()); !st.ok()) return st;
    auto malformed = [&](absl::string_view why) {
      return absl::InternalError(absl::StrCat("Download failed: the server sent ", why));
    };
    if (first) return malformed("no message");
    DType dtype;
    switch (info.dtype()) {
      case v1::DTYPE_FLOAT32: dtype = DType::kFloat32; break;
      case v1::DTYPE_FLOAT64: dtype = DType::kFloat64; break;
      default: return malformed(absl::StrCat("info.dtype ", int(info.dtype())));
    }
    absl::StatusOr<Matrix> m = Matrix::FromBytes(dtype, info.rows(), info.cols(), std::move(bytes));
    if (!m.ok()) return malformed(m.status().message());
    if (info_out != nullptr) *info_out = std::move(info);
    return m;
  }

  absl::StatusOr<v1::ReleaseTensorsResponse> Release(const std::vector<std::string>& ids) const {
    v1::ReleaseTensorsRequest request;
    for (const std::string& id : ids) request.add_tensor_ids(id);
    v1::ReleaseTensorsResponse response;
    grpc::ClientContext context;
    Prepare(&context);
    if (absl::Status st =
            Finish("ReleaseTensors", stub->ReleaseTensors(&context, request, &response));
        !st.ok()) {
      return st;
    }
    return response;
  }
};
}  // namespace internal

}  // namespace gpucompute
