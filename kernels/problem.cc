#include "gpucompute/kernels/problem.h"

namespace gpucompute::kernels {

const char* OpName(Op op) {
  switch (op) {
    case Op::kMatMul: return "matmul";
    case Op::kTranspose: return "transpose";
    case Op::kReduce: return "reduce";
  }
  return "unknown";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMean: return "mean";
  }
  return "unknown";
}

const char* ReduceAxisName(ReduceAxis axis) {
  switch (axis) {
    case ReduceAxis::kAll: return "all";
    case ReduceAxis::kPerRow: return "per_row";
    case ReduceAxis::kPerColumn: return "per_column";
  }
  return "unknown";
}

const char* BackendName(Backend backend) { return backend == Backend::kCpu ? "cpu" : "cuda"; }

int64_t InputAElements(const Problem& p) { return p.op == Op::kMatMul ? p.m * p.k : p.m * p.n; }

int64_t InputBElements(const Problem& p) { return p.op == Op::kMatMul ? p.k * p.n : 0; }

int64_t OutputRows(const Problem& p) {
  switch (p.op) {
    case Op::kMatMul: return p.m;
    case Op::kTranspose: return p.n;
    case Op::kReduce: return p.reduce_axis == ReduceAxis::kPerRow ? p.m : 1;
  }
  return 0;
}

int64_t OutputCols(const Problem& p) {
  switch (p.op) {
    case Op::kMatMul: return p.n;
    case Op::kTranspose: return p.m;
    case Op::kReduce: return p.reduce_axis == ReduceAxis::kPerColumn ? p.n : 1;
  }
  return 0;
}

int64_t OutputElements(const Problem& p) { return OutputRows(p) * OutputCols(p); }

DType OutputDType(const Problem& p) { return p.float32_output ? DType::kFloat32 : p.dtype; }

int64_t InputABytes(const Problem& p) { return InputAElements(p) * ElementSize(p.dtype); }
int64_t InputBBytes(const Problem& p) { return InputBElements(p) * ElementSize(p.dtype); }
int64_t OutputBytes(const Problem& p) { return OutputElements(p) * ElementSize(OutputDType(p)); }

double MinimalBytes(const Problem& p) {
  return double(InputABytes(p)) + double(InputBBytes(p)) + double(OutputBytes(p));
}

double UsefulFlops(const Problem& p) {
  switch (p.op) {
    case Op::kMatMul: return 2.0 * double(p.m) * double(p.n) * double(p.k);
    case Op::kTranspose: return 0;
    case Op::kReduce: return double(p.m) * double(p.n);
  }
  return 0;
}

}  // namespace gpucompute::kernels
