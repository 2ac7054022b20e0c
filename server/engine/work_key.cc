#include "server/engine/work_key.h"

namespace gpucompute::server {

std::string WorkKey(const kernels::Variant* variant, const kernels::Problem& p,
                    std::initializer_list<int64_t> more) {
  const int64_t words[] = {KeyWord(variant),
                           int64_t(p.op),
                           int64_t(p.dtype),
                           int64_t(p.float32_output),
                           p.m,
                           p.n,
                           p.k,
                           int64_t(p.reduce_op),
                           int64_t(p.reduce_axis)};
  std::string key;
  key.reserve(sizeof words + more.size() * sizeof(int64_t));
  key.append(reinterpret_cast<const char*>(words), sizeof words);
  for (const int64_t word : more) key.append(reinterpret_cast<const char*>(&word), sizeof word);
  return key;
}

}  // namespace gpucompute::server
