// What a Client's Tensors and SharedMemoryRegions keep: the channel of one
// replica and the call settings, usable after the Client itself is gone; and
// the Client's replicas with which instance each serves.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <grpcpp/generic/generic_stub.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gpucompute/client.h"
#include "gpucompute/matrix.h"
#include "gpucompute/v1/compute.grpc.pb.h"
#include "wire/compute_wire.h"

namespace gpucompute {

namespace internal {

// Stream chunks of at least this many bytes are copied (into a download's
// matrix, out of an upload's matrix) on a helper thread while the calling
// thread keeps gRPC reading or writing the socket.
inline constexpr int64_t kHelperCopyBytes = int64_t{1} << 20;

// `work` on a helper thread when `aside` (and a thread can be had), else
// deferred to the future's get(): the stream goes on either way.
template <typename F>
auto RunAside(bool aside, F&& work) -> std::future<decltype(work())> {
  // Shared, so a launch that fails leaves the work whole for the fallback.
  auto held = std::make_shared<std::decay_t<F>>(std::forward<F>(work));
  auto run = [held] { return (*held)(); };
  if (aside) {
    try {
      return std::async(std::launch::async, run);
    } catch (const std::system_error&) {
      // No thread to be had: the work runs on the caller instead.
    }
  }
  return std::async(std::launch::deferred, run);
}

struct ClientCore {
  std::string target;
  absl::Duration deadline;
  std::string authorization;  // "Bearer <token>", or empty
  bool busy_poll = false;     // ClientOptions::busy_poll
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

  // `reuse`: storage of an earlier matrix, written in place when it has the
  // tensor's byte size (no allocation, no page faults), else dropped.
  absl::StatusOr<Matrix> Download(const std::string& id, int64_t chunk_bytes, bool release,
                                  v1::TensorInfo* info_out, std::string reuse = {}) const {
    v1::DownloadRequest request;
    request.set_tensor_id(id);
    request.set_chunk_bytes(chunk_bytes == 0 ? kDownloadChunkBytes : chunk_bytes);
    request.set_release(release);
    grpc::ClientContext context;
    Prepare(&context);
    // Messages are read as raw bytes and each data field is copied once,
    // from the received slices into the matrix: the generated stub would
    // copy every chunk into a message first.
    grpc::ByteBuffer request_bytes;
    bool own_buffer = false;
    if (!grpc::SerializationTraits<v1::DownloadRequest>::Serialize(request, &request_bytes,
                                                                   &own_buffer)
             .ok()) {
      return absl::InternalError("Download: the request could not be serialized");
    }
    const grpc::internal::RpcMethod method("/gpucompute.v1.Compute/Download",
                                           grpc::internal::RpcMethod::SERVER_STREAMING, channel);
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(channel.get(), method,
                                                                      &context, request_bytes));
    auto malformed = [&](absl::string_view why) {
      return absl::InternalError(absl::StrCat("Download failed: the server sent ", why));
    };
    grpc::ByteBuffer message;
    v1::TensorInfo info;
    bool first = true;
    std::string bytes;
    bool in_place = false;  // writing into `reuse`, at `written`
    size_t written = 0;
    absl::Status broken;
    // A large chunk is copied out of gRPC's slices on a helper thread while
    // this one reads the next message: the synchronous API reads the socket
    // only while a thread is in Read, so copying here would stall the
    // network for as long as the copy takes. One copy runs at a time, in
    // order; the main thread decides every offset and touches `bytes` only
    // when no copy runs.
    std::future<void> copying;
    auto wait_for_copy = [&copying] {
      if (copying.valid()) copying.get();
    };
    while (reader->Read(&message)) {
      std::vector<grpc::Slice> slices;
      auto parsed = message.Dump(&slices).ok() ? wire::ParseDownloadResponse(slices)
                                               : absl::InternalError("an unreadable message");
      if (!parsed.ok()) {
        if (broken.ok()) broken = malformed(parsed.status().message());
        continue;  // drain the stream; Finish says how it ended
      }
      if (first) {
        info = parsed->info;
        if (info.bytes() > 0 && reuse.size() == size_t(info.bytes())) {
          bytes = std::move(reuse);
          in_place = true;
        } else if (info.bytes() > 0) {
          bytes.reserve(size_t(info.bytes()));
        }
        first = false;
      }
      if (in_place && written + size_t(parsed->data_bytes) > bytes.size()) {
        if (broken.ok()) {
          broken = malformed(absl::StrCat("more than the ", info.bytes(), " bytes its info gave"));
        }
        continue;
      }
      // In place, each chunk has its own range; appended, they go in order.
      char* const into = in_place ? bytes.data() + written : nullptr;
      written += size_t(parsed->data_bytes);
      auto copy = [&bytes, into, pieces = std::move(parsed->data),
                   held = std::move(slices)]() mutable {
        char* at = into;
        for (const auto& piece : pieces) {
          if (at != nullptr) {
            std::memcpy(at, piece.data(), piece.size());
            at += piece.size();
          } else {
            bytes.append(piece.data(), piece.size());
          }
        }
        held.clear();  // gRPC's buffers go back before the next Read needs them
      };
      wait_for_copy();
      copying = RunAside(parsed->data_bytes >= kHelperCopyBytes, std::move(copy));
    }
    wait_for_copy();
    if (absl::Status st = Finish("Download", reader->Finish()); !st.ok()) return st;
    if (!broken.ok()) return broken;
    if (first) return malformed("no message");
    if (in_place && written != bytes.size()) {
      return malformed(absl::StrCat(written, " of the ", bytes.size(), " bytes its info gave"));
    }
    absl::StatusOr<DType> dtype = DTypeFromProto(info.dtype(), "info.dtype");
    if (!dtype.ok()) return malformed(dtype.status().message());
    absl::StatusOr<Matrix> m =
        Matrix::FromBytes(*dtype, info.rows(), info.cols(), std::move(bytes));
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

// The instance a tensor id names: ids are "<32 hex digits>@<instance>".
inline std::string InstanceOf(const std::string& tensor_id) {
  const size_t at = tensor_id.find('@');
  return at == std::string::npos ? std::string() : tensor_id.substr(at + 1);
}

// One target of a Client: its channels (ClientOptions::connections) and the
// core its Tensors keep.
struct Replica {
  std::shared_ptr<const ClientCore> core;  // on channels.front()
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<grpc::GenericStub>> generic_stubs;  // one per channel
  std::atomic<uint64_t> next_channel{0};                          // compute calls take turns

  grpc::GenericStub& NextStub() {
    return *generic_stubs[next_channel.fetch_add(1) % generic_stubs.size()];
  }
};

// The replicas of a Client and which instance (a tensor id's "@<instance>",
// TensorInfo.server, GetServerInfo's instance_name) each serves, learnt
// lazily. Thread-safe.
struct Replicas {
  std::vector<std::unique_ptr<Replica>> list;  // fixed once created
  std::vector<std::string> targets;            // list[i]'s target with its port
  bool balanced = false;  // lb_policy round_robin: a target reaches no one replica
  std::atomic<uint64_t> turn{0};

  size_t size() const { return list.size(); }
  Replica& operator[](size_t i) const { return *list[i]; }

  // The replica of a call naming no tensor.
  size_t Any() { return list.size() > 1 ? size_t(turn.fetch_add(1) % list.size()) : 0; }

  void Learn(const std::string& instance, size_t index) {
    if (instance.empty() || balanced) return;
    std::lock_guard<std::mutex> lock(mu_);
    instances_.emplace(instance, index);
  }

  // The replica of `instance` when known: learnt, the only one, or a target
  // spelt as the instance (the server's default instance name is the
  // host:port it listens on).
  std::optional<size_t> Known(const std::string& instance, const std::string& with_port) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = instances_.find(instance); it != instances_.end()) return it->second;
    }
    if (list.size() == 1) return 0;
    if (balanced || instance.empty()) return std::nullopt;
    for (size_t i = 0; i < targets.size(); ++i) {
      const std::string& t = targets[i];
      const size_t slashes = t.find("///");
      if ((slashes == std::string::npos ? t : t.substr(slashes + 3)) == with_port) return i;
    }
    return std::nullopt;
  }

  // The replica holding tensors of `instance`: asks the replicas not asked
  // yet for their instance name when it is not known; the first replica
  // (whose NOT_FOUND names the holder) when none serves it.
  size_t Index(const std::string& instance, const std::string& with_port) {
    if (std::optional<size_t> i = Known(instance, with_port)) return *i;
    if (balanced) return 0;
    for (size_t j = 0; j < list.size(); ++j) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (asked_.count(j) > 0) continue;
      }
      const ClientCore& core = *list[j]->core;
      v1::ServerInfo info;
      grpc::ClientContext context;
      core.Prepare(&context);
      if (!core.stub->GetServerInfo(&context, v1::ServerInfoRequest(), &info).ok()) continue;
      {
        std::lock_guard<std::mutex> lock(mu_);
        asked_.insert(j);
      }
      Learn(info.instance_name(), j);
      if (info.instance_name() == instance) return j;
    }
    return Known(instance, with_port).value_or(0);
  }

 private:
  std::mutex mu_;
  std::map<std::string, size_t> instances_;  // instance name -> index into list
  std::set<size_t> asked_;                   // indexes whose GetServerInfo answered
};
}  // namespace internal

}  // namespace gpucompute
