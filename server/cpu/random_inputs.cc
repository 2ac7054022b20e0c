#include "server/cpu/random_inputs.h"

#include <cstring>
#include <random>
#include <type_traits>

#include "gpucompute/kernels/half.h"

namespace gpucompute::server {
namespace {

// Values in [-1, 1), drawn in double and rounded to the element type.
template <typename T>
void Fill(std::vector<char>& bytes, int64_t elements, std::mt19937_64& rng) {
  bytes.resize(elements * sizeof(T));
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (int64_t i = 0; i < elements; ++i) {
    T v;
    if constexpr (std::is_same_v<T, double>) {
      v = dist(rng);
    } else {
      v = kernels::FromFloat<T>(float(dist(rng)));
    }
    std::memcpy(bytes.data() + i * sizeof(T), &v, sizeof(T));
  }
}

template <typename T>
void FillBoth(int64_t na, int64_t nb, std::mt19937_64& rng, std::vector<char>& a,
              std::vector<char>& b) {
  Fill<T>(a, na, rng);
  Fill<T>(b, nb, rng);
}

}  // namespace

void FillRandomInputs(const kernels::Problem& p, uint64_t seed, std::vector<char>& a,
                      std::vector<char>& b) {
  std::mt19937_64 rng(seed);
  const int64_t na = kernels::InputAElements(p), nb = kernels::InputBElements(p);
  switch (p.dtype) {
    case kernels::DType::kFloat32: return FillBoth<float>(na, nb, rng, a, b);
    case kernels::DType::kFloat64: return FillBoth<double>(na, nb, rng, a, b);
    case kernels::DType::kFloat16: return FillBoth<kernels::Float16>(na, nb, rng, a, b);
    case kernels::DType::kBFloat16: return FillBoth<kernels::BFloat16>(na, nb, rng, a, b);
  }
}

// All-ones bytes are a NaN in every dtype.
void PoisonWithNaN(kernels::DType dtype, void* data, int64_t elements) {
  std::memset(data, 0xff, size_t(elements * kernels::ElementSize(dtype)));
}

}  // namespace gpucompute::server
