#include "server/cpu/random_inputs.h"

#include <limits>
#include <random>

namespace gpucompute::server {
namespace {

template <typename T>
void Fill(std::vector<char>& bytes, int64_t elements, std::mt19937_64& rng) {
  bytes.resize(elements * sizeof(T));
  std::uniform_real_distribution<T> dist(T(-1), T(1));
  T* data = reinterpret_cast<T*>(bytes.data());
  for (int64_t i = 0; i < elements; ++i) data[i] = dist(rng);
}

template <typename T>
void Poison(void* data, int64_t elements) {
  T* p = static_cast<T*>(data);
  for (int64_t i = 0; i < elements; ++i) p[i] = std::numeric_limits<T>::quiet_NaN();
}

}  // namespace

void FillRandomInputs(const kernels::Problem& p, uint64_t seed, std::vector<char>& a,
                      std::vector<char>& b) {
  std::mt19937_64 rng(seed);
  const int64_t na = kernels::InputAElements(p), nb = kernels::InputBElements(p);
  if (p.dtype == kernels::DType::kFloat32) {
    Fill<float>(a, na, rng);
    Fill<float>(b, nb, rng);
  } else {
    Fill<double>(a, na, rng);
    Fill<double>(b, nb, rng);
  }
}

void PoisonWithNaN(kernels::DType dtype, void* data, int64_t elements) {
  if (dtype == kernels::DType::kFloat32) {
    Poison<float>(data, elements);
  } else {
    Poison<double>(data, elements);
  }
}

}  // namespace gpucompute::server
