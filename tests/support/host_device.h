// A Device for engine tests whose "device memory" is host memory: it runs
// nothing (Execute succeeds at once unless a test overrides it), measures
// nothing, and copies tensor bytes with memcpy.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "server/engine/device.h"

namespace gpucompute::testing {

class HostResidentMemory : public server::ResidentMemory {
 public:
  explicit HostResidentMemory(int64_t bytes) : data_(size_t(bytes)) {}
  void* data() const override { return const_cast<char*>(data_.data()); }
  int64_t bytes() const override { return int64_t(data_.size()); }

 private:
  std::vector<char> data_;
};

class HostDevice : public server::Device {
 public:
  explicit HostDevice(std::string name, int concurrency = 1) : concurrency_(concurrency) {
    description_.name = std::move(name);
  }
  const server::DeviceDescription& description() const override { return description_; }
  const server::Ceilings& ceilings() const override { return ceilings_; }
  int concurrency() const override { return concurrency_; }
  absl::StatusOr<server::StageTimes> Execute(const server::ComputeJob&,
                                             const server::StopRequested&) override {
    return server::StageTimes{};
  }
  absl::StatusOr<std::vector<server::VariantMeasurement>> Measure(
      const server::ProfileJob&, const server::StopRequested&) override {
    return std::vector<server::VariantMeasurement>{};
  }
  absl::StatusOr<std::unique_ptr<server::ResidentMemory>> AllocateResident(int64_t bytes,
                                                                           absl::Time) override {
    return std::make_unique<HostResidentMemory>(bytes);
  }
  absl::Status WriteResident(server::ResidentMemory& dst, int64_t offset,
                             const server::HostPieces& src, bool /*src_pinned*/) override {
    char* at = static_cast<char*>(dst.data()) + offset;
    for (const auto& p : src) at = std::copy(p.begin(), p.end(), at);
    return absl::OkStatus();
  }
  absl::Status ReadResident(const server::ResidentMemory& src, int64_t offset, int64_t bytes,
                            void* dst, bool /*dst_pinned*/) override {
    std::copy_n(static_cast<const char*>(src.data()) + offset, bytes, static_cast<char*>(dst));
    return absl::OkStatus();
  }

 private:
  server::DeviceDescription description_;
  server::Ceilings ceilings_;
  const int concurrency_;
};

}  // namespace gpucompute::testing
