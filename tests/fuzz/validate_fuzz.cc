// Request validation (server/grpc/validate.h) on arbitrary field values and
// limits: it must never crash or hit undefined behaviour, must answer OK,
// INVALID_ARGUMENT or RESOURCE_EXHAUSTED, and what it accepts must be a
// problem whose operands and result fit the limits.
//
// Input: byte 0 picks the function; the rest feeds the field values
// (FuzzedDataProvider), or, for the message overloads, is parsed as the
// request message.
#include <fuzzer/FuzzedDataProvider.h>
#include <google/protobuf/stubs/logging.h>
#include <algorithm>

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "server/grpc/validate.h"

namespace gpucompute::server {
namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "\nvalidate_fuzz: %s\n", what.c_str());
  std::abort();
}

// Mostly values near the interesting edges (0, 1, small, the int64 ends).
int64_t Dim(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: return in.ConsumeIntegralInRange<int64_t>(-2, 8);
    case 1: return in.ConsumeIntegralInRange<int64_t>(0, int64_t{1} << 20);
    case 2: return std::numeric_limits<int64_t>::max() - in.ConsumeIntegralInRange<int64_t>(0, 8);
    default: return in.ConsumeIntegral<int64_t>();
  }
}

// A proto DType number: mostly around the known ones, sometimes anything.
int DTypeNumber(FuzzedDataProvider& in) {
  return in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(-1, 5) : in.ConsumeIntegral<int>();
}

MatrixShape Shape(FuzzedDataProvider& in) {
  MatrixShape m;
  m.dtype = DTypeNumber(in);
  m.rows = Dim(in);
  m.cols = Dim(in);
  // Often the right size, so that the later checks are reached.
  const int64_t elem = std::max<int64_t>(1, MatrixBytes(1, 1, m.dtype));
  int64_t bytes = 0;
  const bool fits = !__builtin_mul_overflow(m.rows, m.cols, &bytes) &&
                    !__builtin_mul_overflow(bytes, elem, &bytes);
  m.data_bytes = fits && in.ConsumeBool() ? bytes : Dim(in);
  return m;
}

Limits LimitsFrom(FuzzedDataProvider& in) {
  Limits limits;
  if (in.ConsumeBool()) {
    limits.max_matrix_bytes =
        in.ConsumeIntegralInRange<int64_t>(0, std::numeric_limits<int64_t>::max());
    limits.max_profile_repetitions = in.ConsumeIntegralInRange<int32_t>(0, 1 << 20);
  }
  return limits;
}

int64_t Bytes(int64_t rows, int64_t cols, kernels::DType dtype) {
  int64_t out = 0;
  if (__builtin_mul_overflow(rows, cols, &out) ||
      __builtin_mul_overflow(out, kernels::ElementSize(dtype), &out)) {
    return -1;
  }
  return out;
}

// An accepted problem: positive dimensions, every operand and the result
// within max_matrix_bytes; the arithmetic the engine then does on it must
// not overflow (UBSan watches InputAElements and the rest).
void CheckProblem(const kernels::Problem& p, const Limits& limits, const char* what) {
  if (p.m < 1 || p.n < 1 || p.k < 1) Fail(std::string(what) + ": accepted a dimension below 1");
  const auto fits = [&](int64_t rows, int64_t cols) {
    const int64_t b = Bytes(rows, cols, p.dtype);
    return b >= 0 && b <= limits.max_matrix_bytes;
  };
  const bool matmul = p.op == kernels::Op::kMatMul;
  if (!fits(p.m, matmul ? p.k : p.n)) Fail(std::string(what) + ": accepted an oversized a/input");
  if (matmul && !fits(p.k, p.n)) Fail(std::string(what) + ": accepted an oversized b");
  if (p.float32_output && (!kernels::IsHalfPrecision(p.dtype) || p.op == kernels::Op::kTranspose)) {
    Fail(std::string(what) + ": accepted a float32 output the contract does not allow");
  }
  const int64_t out_bytes =
      Bytes(kernels::OutputRows(p), kernels::OutputCols(p), kernels::OutputDType(p));
  if (out_bytes < 0 || out_bytes > limits.max_matrix_bytes) {
    Fail(std::string(what) + ": accepted an oversized result");
  }
  (void)kernels::InputAElements(p);
  (void)kernels::InputBElements(p);
  (void)kernels::OutputElements(p);
  (void)kernels::MinimalBytes(p);
  (void)kernels::UsefulFlops(p);
}

void CheckStatus(const absl::StatusOr<kernels::Problem>& r, const Limits& limits,
                 const char* what) {
  switch (r.status().code()) {
    case absl::StatusCode::kOk: CheckProblem(*r, limits, what); return;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kResourceExhausted:
      if (r.status().message().empty()) Fail(std::string(what) + ": an error without a message");
      return;
    default: Fail(std::string(what) + ": unexpected status " + r.status().ToString());
  }
}

void CheckShapeMatches(const absl::StatusOr<kernels::Problem>& r, const MatrixShape& m,
                       const char* what) {
  if (!r.ok()) return;
  if (r->m != m.rows || r->n != m.cols || Bytes(m.rows, m.cols, r->dtype) != m.data_bytes) {
    Fail(std::string(what) + ": accepted a payload that does not match its shape");
  }
}

}  // namespace
}  // namespace gpucompute::server

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpucompute::server;
  if (size < 1) return 0;
  FuzzedDataProvider in(data + 1, size - 1);
  switch (data[0] % 8) {
    case 0: {
      const MatrixShape a = Shape(in), b = Shape(in);
      const Limits limits = LimitsFrom(in);
      auto r = ValidateMatMul(a, b, limits, /*output_kept=*/false, DTypeNumber(in));
      CheckStatus(r, limits, "ValidateMatMul");
      if (r.ok() && (r->m != a.rows || r->k != a.cols || r->k != b.rows || r->n != b.cols)) {
        Fail("ValidateMatMul: accepted inner dimensions that differ");
      }
      break;
    }
    case 1: {
      const MatrixShape m = Shape(in);
      const Limits limits = LimitsFrom(in);
      auto r = ValidateTranspose(m, limits);
      CheckStatus(r, limits, "ValidateTranspose");
      CheckShapeMatches(r, m, "ValidateTranspose");
      break;
    }
    case 2: {
      const MatrixShape m = Shape(in);
      const int op =
          in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(-1, 4) : in.ConsumeIntegral<int>();
      const int axis =
          in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(-1, 3) : in.ConsumeIntegral<int>();
      const Limits limits = LimitsFrom(in);
      auto r = ValidateReduce(m, op, axis, limits, /*output_kept=*/false, DTypeNumber(in));
      CheckStatus(r, limits, "ValidateReduce");
      CheckShapeMatches(r, m, "ValidateReduce");
      break;
    }
    case 3: {
      gpucompute::v1::ProfileRequest req;
      req.set_op(static_cast<gpucompute::v1::Op>(
          in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(-1, 4) : in.ConsumeIntegral<int>()));
      req.set_dtype(static_cast<gpucompute::v1::DType>(DTypeNumber(in)));
      req.set_m(Dim(in));
      req.set_n(Dim(in));
      req.set_k(Dim(in));
      req.set_reduce_op(static_cast<gpucompute::v1::ReduceOp>(
          in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(-1, 4) : in.ConsumeIntegral<int>()));
      req.set_reduce_axis(static_cast<gpucompute::v1::ReduceAxis>(
          in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(-1, 3) : in.ConsumeIntegral<int>()));
      req.set_warmup(in.ConsumeBool() ? in.ConsumeIntegralInRange<int32_t>(-1, 1001)
                                      : in.ConsumeIntegral<int32_t>());
      req.set_repetitions(in.ConsumeBool() ? in.ConsumeIntegralInRange<int32_t>(-1, 1001)
                                           : in.ConsumeIntegral<int32_t>());
      const Limits limits = LimitsFrom(in);
      auto r = ValidateProfile(req, limits);
      CheckStatus(r, limits, "ValidateProfile");
      if (r.ok() && (req.warmup() < 0 || req.warmup() > limits.max_profile_repetitions ||
                     req.repetitions() < 0 || req.repetitions() > limits.max_profile_repetitions)) {
        Fail("ValidateProfile: accepted warmup/repetitions outside [0, max]");
      }
      break;
    }
    default: {
      // The message overloads, on whatever protobuf makes of the bytes.
      const Limits limits;
      const std::string bytes = in.ConsumeRemainingBytesAsString();
      switch (data[0] % 8) {
        case 4: {
          gpucompute::v1::MatMulRequest req;
          if (req.ParseFromString(bytes))
            CheckStatus(ValidateMatMul(req, limits), limits, "ValidateMatMul(msg)");
          break;
        }
        case 5: {
          gpucompute::v1::TransposeRequest req;
          if (req.ParseFromString(bytes)) {
            CheckStatus(ValidateTranspose(req, limits), limits, "ValidateTranspose(msg)");
          }
          break;
        }
        case 6: {
          gpucompute::v1::ReduceRequest req;
          if (req.ParseFromString(bytes))
            CheckStatus(ValidateReduce(req, limits), limits, "ValidateReduce(msg)");
          break;
        }
        default: {
          gpucompute::v1::ProfileRequest req;
          if (req.ParseFromString(bytes)) {
            CheckStatus(ValidateProfile(req, limits), limits, "ValidateProfile(msg)");
          }
          break;
        }
      }
    }
  }
  return 0;
}
