// Helpers for tests of tensors over gRPC with the generated stub: Upload in
// messages of chosen sizes (or from a generator, so that a test never holds
// a large payload), Download, ListTensors, ReleaseTensors, and a Matrix that
// names a tensor.
#pragma once

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gpucompute/v1/compute.grpc.pb.h"

namespace gpucompute::testing {

namespace v1 = ::gpucompute::v1;

inline void SetDeadline(grpc::ClientContext& ctx, int seconds) {
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
}

// Writes the bytes [offset, offset + n) of the payload to `dst`.
using Generator = std::function<void(int64_t offset, char* dst, int64_t n)>;

// Uploads a dtype rows x cols tensor of `total` bytes made by `gen`, in
// messages whose data sizes cycle through `chunks` (the first message
// carries the first chunk with the shape). `ttl_seconds` as in UploadRequest.
inline grpc::Status UploadFrom(v1::Compute::Stub& stub, v1::DType dtype, int64_t rows, int64_t cols,
                               int64_t total, const Generator& gen,
                               const std::vector<int64_t>& chunks, v1::TensorInfo* info,
                               int64_t ttl_seconds = 0, int timeout_s = 300) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout_s);
  auto writer = stub.Upload(&ctx, info);
  int64_t sent = 0;
  size_t i = 0;
  bool first = true;
  while (first || sent < total) {
    v1::UploadRequest req;
    if (first) {
      req.set_dtype(dtype);
      req.set_rows(rows);
      req.set_cols(cols);
      req.set_ttl_seconds(ttl_seconds);
    }
    const int64_t n = std::min(chunks[i++ % chunks.size()], total - sent);
    std::string* data = req.mutable_data();
    data->resize(size_t(n));
    gen(sent, data->data(), n);
    sent += n;
    first = false;
    if (!writer->Write(req)) break;  // the server answered early: Finish says why
  }
  writer->WritesDone();
  return writer->Finish();
}

inline grpc::Status UploadBytes(v1::Compute::Stub& stub, v1::DType dtype, int64_t rows,
                                int64_t cols, const std::string& bytes,
                                const std::vector<int64_t>& chunks, v1::TensorInfo* info,
                                int64_t ttl_seconds = 0) {
  return UploadFrom(
      stub, dtype, rows, cols, int64_t(bytes.size()),
      [&bytes](int64_t offset, char* dst, int64_t n) {
        bytes.copy(dst, size_t(n), size_t(offset));
      },
      chunks, info, ttl_seconds);
}

// Downloads a tensor; `visit` sees each message's data at its offset.
inline grpc::Status DownloadTo(v1::Compute::Stub& stub, const std::string& id, int64_t chunk_bytes,
                               bool release,
                               const std::function<void(int64_t, const std::string&)>& visit,
                               v1::TensorInfo* info = nullptr, int* messages = nullptr,
                               int timeout_s = 300) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, timeout_s);
  v1::DownloadRequest req;
  req.set_tensor_id(id);
  req.set_chunk_bytes(chunk_bytes);
  req.set_release(release);
  auto reader = stub.Download(&ctx, req);
  v1::DownloadResponse resp;
  int64_t offset = 0;
  int count = 0;
  while (reader->Read(&resp)) {
    if (count == 0 && info != nullptr) *info = resp.info();
    visit(offset, resp.data());
    offset += int64_t(resp.data().size());
    ++count;
  }
  if (messages != nullptr) *messages = count;
  return reader->Finish();
}

inline grpc::Status DownloadBytes(v1::Compute::Stub& stub, const std::string& id, std::string* out,
                                  int64_t chunk_bytes = 0, bool release = false,
                                  v1::TensorInfo* info = nullptr, int* messages = nullptr) {
  out->clear();
  return DownloadTo(
      stub, id, chunk_bytes, release,
      [out](int64_t, const std::string& data) { out->append(data); }, info, messages);
}

inline v1::ListTensorsResponse ListTensors(v1::Compute::Stub& stub) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, 30);
  v1::ListTensorsResponse resp;
  grpc::Status s = stub.ListTensors(&ctx, {}, &resp);
  if (!s.ok()) resp.set_held_bytes(-1);
  return resp;
}

inline v1::ReleaseTensorsResponse ReleaseTensors(v1::Compute::Stub& stub,
                                                 const std::vector<std::string>& ids) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, 30);
  v1::ReleaseTensorsRequest req;
  for (const auto& id : ids) req.add_tensor_ids(id);
  v1::ReleaseTensorsResponse resp;
  grpc::Status s = stub.ReleaseTensors(&ctx, req, &resp);
  if (!s.ok()) resp.set_released(-1);
  return resp;
}

// Polls ListTensors until `pred(held_bytes)` holds or `seconds` pass.
inline bool WaitForHeld(v1::Compute::Stub& stub, const std::function<bool(int64_t)>& pred,
                        int seconds = 20) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (pred(ListTensors(stub).held_bytes())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// A Matrix naming a tensor; dtype, rows and cols 0 (the tensor's own).
inline v1::Matrix TensorMatrix(const std::string& id) {
  v1::Matrix m;
  m.set_tensor_id(id);
  return m;
}

}  // namespace gpucompute::testing
