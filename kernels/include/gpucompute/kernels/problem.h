// Shapes and element types of one operation, independent of gRPC and CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gpucompute/kernels/dtype.h"

namespace gpucompute::kernels {

enum class Op { kMatMul, kTranspose, kReduce };
enum class ReduceOp { kSum, kMin, kMax, kMean };
enum class ReduceAxis { kAll, kPerRow, kPerColumn };
enum class Backend { kCpu, kCuda };

// Every op, in enum order: what makes one of something per op loops over.
inline constexpr Op kAllOps[] = {Op::kMatMul, Op::kTranspose, Op::kReduce};
inline constexpr int kOpCount = sizeof(kAllOps) / sizeof(kAllOps[0]);

const char* OpName(Op op);
const char* ReduceOpName(ReduceOp op);
const char* ReduceAxisName(ReduceAxis axis);
const char* BackendName(Backend backend);

// One operation on dense row-major matrices.
//   MatMul:           a is m x k, b is k x n, out is m x n.
//   Transpose:        a is m x n, out is n x m.
//   Reduce ALL:       a is m x n, out is 1 x 1.
//   Reduce PER_ROW:   out is m x 1.   PER_COLUMN: out is 1 x n.
struct Problem {
  Op op = Op::kMatMul;
  DType dtype = DType::kFloat32;  // the inputs'
  int64_t m = 1;
  int64_t n = 1;
  int64_t k = 1;
  ReduceOp reduce_op = ReduceOp::kSum;
  ReduceAxis reduce_axis = ReduceAxis::kAll;
  // MatMul and Reduce of 16-bit inputs: the result in float32 instead of
  // the inputs' dtype (the request's output_dtype). Last, so that positional
  // initializers of the fields above keep their meaning.
  bool float32_output = false;
};

// Element counts of the operands; b is zero when the op has none.
int64_t InputAElements(const Problem& p);
int64_t InputBElements(const Problem& p);
int64_t OutputElements(const Problem& p);
int64_t OutputRows(const Problem& p);
int64_t OutputCols(const Problem& p);

// The result's element type: the inputs', or float32 when asked for.
DType OutputDType(const Problem& p);
// Bytes of each operand (b: zero when the op has none).
int64_t InputABytes(const Problem& p);
int64_t InputBBytes(const Problem& p);
int64_t OutputBytes(const Problem& p);

// Minimal bytes moved (inputs read once, output written once) and useful
// floating-point operations (MatMul 2mnk, Reduce m*n, Transpose 0).
double MinimalBytes(const Problem& p);
double UsefulFlops(const Problem& p);

}  // namespace gpucompute::kernels
