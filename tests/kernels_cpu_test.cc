#include <gtest/gtest.h>
#include "gpucompute/kernels/registry.h"
TEST(Smoke, Registry) { EXPECT_FALSE(gpucompute::kernels::DefaultRegistry().List(gpucompute::kernels::Backend::kCpu).empty()); }
