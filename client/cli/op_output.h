// How matmul, transpose and reduce send their request (--repeat times) and
// show the result: the server's report, the matrix or its tensor id, --out.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "command.h"
#include "flags.h"
#include "gpucompute/client.h"
#include "gpucompute/common/time.h"
#include "gpucompute/shared_memory.h"

namespace gpucompute::cli {

// The server's execution report and the round trip the client saw.
void PrintReport(const v1::ExecutionReport& r, double round_trip_us);

// Prints the result, writes --out, and picks the exit code. A result
// written into shared memory (--shm) is read from `shm_output`.
int FinishOp(const ParsedArgs& args, absl::StatusOr<OpResult> result,
             std::chrono::steady_clock::time_point start,
             const std::optional<SharedMemoryView>& shm_output);

// --variant, with auto as "" (the server chooses).
std::string Variant(const ParsedArgs& args);

// Sends the request --repeat times; every call but the last is sent from a
// copy of the inputs made before its clock starts, so each is timed alike.
// With --keep, the results of the earlier calls are released again.
// With --shm, `shm_output` is the view the result is written into.
template <typename Send>  // Send(std::vector<Operand> inputs) -> absl::StatusOr<OpResult>
int SendAndFinish(const ParsedArgs& args, std::vector<Operand>& inputs, Send send,
                  const std::optional<SharedMemoryView>& shm_output) {
  absl::StatusOr<int64_t> repeat = ParseInt(args, "repeat", 1);
  if (!repeat.ok()) return UsageError(repeat.status());
  for (int64_t i = 1; i < *repeat; ++i) {
    std::vector<Operand> copy = inputs;
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<OpResult> result = send(std::move(copy));
    if (!result.ok()) return FinishOp(args, std::move(result), start, shm_output);
    PrintReport(result->report, common::MicrosSince(start));
  }
  const auto start = std::chrono::steady_clock::now();
  return FinishOp(args, send(std::move(inputs)), start, shm_output);
}

// --keep, --ttl and --out as the ops take them.
// --output_dtype of matmul and reduce: unset, or the dtype it names.
absl::StatusOr<std::optional<DType>> OutputDTypeFlag(const ParsedArgs& args);

absl::StatusOr<OpOptions> Placement(const ParsedArgs& args);

}  // namespace gpucompute::cli
