// upload, download, tensors and release: matrices held by the server.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "command.h"
#include "gpucompute/common/time.h"
#include "gpucompute/npy.h"

namespace gpucompute::cli {

namespace {

std::string FormatExpiry(int64_t expires_unix_ms) {
  if (expires_unix_ms <= 0) return "-";
  const int64_t left_s = (expires_unix_ms - absl::ToUnixMillis(absl::Now())) / 1000;
  return absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(expires_unix_ms),
                                       absl::UTCTimeZone()),
                      " (in ", std::max<int64_t>(left_s, 0), " s)");
}

void PrintTensorInfo(const v1::TensorInfo& info) {
  std::printf("id        %s\n", info.id().c_str());
  std::printf("shape     %" PRId64 "x%" PRId64 " %s (%s)\n", info.rows(), info.cols(),
              ProtoDTypeText(info.dtype()).c_str(), FormatBytes(info.bytes()).c_str());
  std::printf("device    %s\n", info.device().c_str());
  std::printf("server    %s\n", info.server().c_str());
  std::printf("expires   %s\n", FormatExpiry(info.expires_unix_ms()).c_str());
}

int RunUpload(const ParsedArgs& args, const Client& client) {
  if (args.positional().size() != 1) {
    return UsageError(absl::InvalidArgumentError(
        absl::StrCat("expected one .npy file, got ", args.positional().size())));
  }
  absl::StatusOr<int64_t> ttl = ParseInt(args, "ttl", 0);
  if (!ttl.ok()) return UsageError(ttl.status());
  absl::StatusOr<int64_t> chunk = ParseInt(args, "chunk_bytes", 1);
  if (!chunk.ok()) return UsageError(chunk.status());
  absl::StatusOr<Matrix> m = ReadNpy(args.positional()[0]);
  if (!m.ok()) return UsageError(m.status());
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Tensor> tensor =
      client.Upload(*m, UploadOptions{.ttl_seconds = *ttl, .chunk_bytes = *chunk});
  const double us = common::MicrosSince(start);
  if (!tensor.ok()) return CallFailed(tensor.status());
  PrintTensorInfo(tensor->info());
  std::printf("upload    %.0f us (%.1f MB/s)\n", us, m->byte_size() / std::max(us, 1.0));
  tensor->Detach();  // held until released or expired
  return kExitOk;
}

int RunDownload(const ParsedArgs& args, const Client& client) {
  if (args.positional().size() != 2) {
    return UsageError(absl::InvalidArgumentError(
        absl::StrCat("expected a tensor id and an output .npy file, got ", args.positional().size(),
                     " argument(s)")));
  }
  std::string id = args.positional()[0];
  if (id.size() > 1 && id[0] == '@') id = id.substr(1);
  absl::StatusOr<int64_t> chunk = ParseInt(args, "chunk_bytes", 0);
  if (!chunk.ok()) return UsageError(chunk.status());
  v1::TensorInfo info;
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Matrix> m = client.Download(id, *chunk, args.GetBool("release"), &info);
  const double us = common::MicrosSince(start);
  if (!m.ok()) return CallFailed(m.status());
  PrintTensorInfo(info);
  std::printf("download  %.0f us (%.1f MB/s)%s\n", us, m->byte_size() / std::max(us, 1.0),
              args.GetBool("release") ? "; released" : "");
  PrintSummary(*m);
  if (absl::Status st = WriteNpy(args.positional()[1], *m); !st.ok()) return CallFailed(st);
  std::printf("wrote     %s\n", args.positional()[1].c_str());
  return kExitOk;
}

int RunTensors(const ParsedArgs&, const Client& client) {
  absl::StatusOr<v1::ListTensorsResponse> list = client.ListTensors();
  if (!list.ok()) return CallFailed(list.status());
  size_t width = 2;
  for (const v1::TensorInfo& t : list->tensors()) width = std::max(width, t.id().size());
  const int w = static_cast<int>(width);
  std::printf("%-*s  %-22s  %12s  %-12s  %s\n", w, "id", "shape", "bytes", "device", "expires");
  for (const v1::TensorInfo& t : list->tensors()) {
    std::printf("%-*s  %-22s  %12" PRId64 "  %-12s  %s\n", w, t.id().c_str(),
                absl::StrCat(t.rows(), "x", t.cols(), " ", ProtoDTypeText(t.dtype())).c_str(),
                t.bytes(), t.device().c_str(), FormatExpiry(t.expires_unix_ms()).c_str());
  }
  std::printf("%d tensor%s, %s held of %s\n", list->tensors_size(),
              list->tensors_size() == 1 ? "" : "s", FormatBytes(list->held_bytes()).c_str(),
              FormatBytes(list->limit_bytes()).c_str());
  return kExitOk;
}

int RunRelease(const ParsedArgs& args, const Client& client) {
  if (args.positional().empty()) {
    return UsageError(absl::InvalidArgumentError("expected one or more tensor ids"));
  }
  std::vector<std::string> ids;
  for (const std::string& id : args.positional()) {
    ids.push_back(id.size() > 1 && id[0] == '@' ? id.substr(1) : id);
  }
  absl::StatusOr<v1::ReleaseTensorsResponse> r = client.Release(ids);
  if (!r.ok()) return CallFailed(r.status());
  std::printf("released  %" PRId64 " of %zu (%s freed)\n", r->released(), ids.size(),
              FormatBytes(r->bytes_freed()).c_str());
  // Ids the server did not hold (unknown, expired) are not an error of the
  // call, but a script should notice.
  return r->released() == static_cast<int64_t>(ids.size()) ? kExitOk : kExitFailed;
}

}  // namespace

std::vector<Command> TensorCommands() {
  return {
      {"upload",
       "hold a matrix on the server; prints its tensor id",
       "[flags] FILE.npy",
       true,
       "Streams the .npy file's matrix to the server in messages of --chunk_bytes\n"
       "(any size the server's tensor budget admits) and prints the tensor's id.\n"
       "Name it as @ID in place of an operand file of matmul, transpose or reduce;\n"
       "it stays until `gpucompute release ID` or --ttl seconds without use.",
       {{"ttl", "SECONDS", "0", "idle lifetime (0: the server's --tensor_ttl)"},
        {"chunk_bytes", "N", "4194304", "bytes per stream message"}},
       600000,
       RunUpload},
      {"download",
       "write a tensor held by the server to a .npy file",
       "[flags] ID OUT.npy",
       true,
       "Streams tensor ID from the server and writes it to OUT.npy.",
       {{"release", "", "", "release the tensor once it has been sent"},
        {"chunk_bytes", "N", "0", "bytes per stream message (0: the server's default)"}},
       600000,
       RunDownload},
      {"tensors",
       "list the tensors held by the server",
       "[flags]",
       false,
       "Lists the tensors the server holds, with their shapes, devices and idle\n"
       "deadlines, and the bytes held against the tensor budget.",
       {},
       10000,
       RunTensors},
      {"release",
       "release tensors held by the server",
       "[flags] ID...",
       true,
       "Releases the tensors by id. Exits 1 when some id was not held (unknown,\n"
       "released or expired).",
       {},
       10000,
       RunRelease},
  };
}

}  // namespace gpucompute::cli
