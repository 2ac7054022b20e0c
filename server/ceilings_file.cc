#include "server/ceilings_file.h"

#include <google/protobuf/util/json_util.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/ops/log.h"

namespace gpucompute::server {
namespace {

// "cuda:0 NVIDIA H200" -> "cuda:0".
std::string ShortName(const Device& device) {
  const std::string& name = device.description().name;
  return name.substr(0, name.find(' '));
}

std::string Where(const std::string& path, int i) {
  return absl::StrCat("--ceilings: ", path, ": devices[", i, "]");
}

// The figures a file may give: the JSON field and the ceiling it sets.
using Entry = tools::v1::CeilingsFile::Device;
struct Figure {
  const char* field;
  double (Entry::*read)() const;
  double Ceilings::*ceiling;
};
constexpr Figure kFigures[] = {
    {"gbytes_per_s", &Entry::gbytes_per_s, &Ceilings::gbytes_per_s},
    {"gbytes_per_s_read", &Entry::gbytes_per_s_read, &Ceilings::gbytes_per_s_read},
    {"gflops", &Entry::gflops, &Ceilings::gflops},
    {"gflops_fp64", &Entry::gflops_fp64, &Ceilings::gflops_fp64},
    {"gflops_tf32", &Entry::gflops_tf32, &Ceilings::gflops_tf32},
    {"gflops_half", &Entry::gflops_half, &Ceilings::gflops_half},
};

}  // namespace

absl::StatusOr<tools::v1::CeilingsFile> ReadCeilingsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--ceilings: cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  tools::v1::CeilingsFile file;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  if (auto s = google::protobuf::util::JsonStringToMessage(text.str(), &file, options); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ceilings: ", path, " is not a CeilingsFile in JSON: ", std::string(s.message())));
  }
  std::set<std::string> seen;
  for (int i = 0; i < file.devices_size(); ++i) {
    const Entry& entry = file.devices(i);
    if (!seen.insert(entry.device()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(path, i), " names device ", entry.device(), " a second time"));
    }
    for (const Figure& f : kFigures) {
      const double value = (entry.*f.read)();
      if (!std::isfinite(value) || value < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            Where(path, i), ".", f.field, ": must be a finite number >= 0, got ", value));
      }
    }
  }
  return file;
}

Ceilings GivenCeilings(const tools::v1::CeilingsFile& file, std::string_view device) {
  Ceilings given;
  for (const Entry& entry : file.devices()) {
    if (entry.device() != device) continue;
    for (const Figure& f : kFigures) given.*f.ceiling = (entry.*f.read)();
  }
  return given;
}

absl::Status ApplyCeilings(const tools::v1::CeilingsFile& file, const std::string& path,
                           const std::vector<std::unique_ptr<Device>>& devices) {
  std::vector<std::string> names;
  for (const auto& d : devices) names.push_back(ShortName(*d));
  for (int i = 0; i < file.devices_size(); ++i) {
    const Entry& entry = file.devices(i);
    Device* device = nullptr;
    for (const auto& d : devices) {
      if (ShortName(*d) == entry.device()) device = d.get();
    }
    if (device == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(path, i), " names device \"", entry.device(),
          "\", which this server does not have (it has ", absl::StrJoin(names, ", "), ")"));
    }
    Ceilings c = device->ceilings();
    for (const Figure& f : kFigures) {
      if (const double value = (entry.*f.read)(); value > 0) c.*f.ceiling = value;
    }
    if (auto s = device->SetCeilings(c); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(Where(path, i), ": ", s.message()));
    }
    LogInfo(absl::StrCat("device ", entry.device(), ": ceilings from ", path, ": ", c.gbytes_per_s,
                         " GB/s copy, ", c.gbytes_per_s_read, " GB/s read, ", c.gflops,
                         " GFLOP/s fp32, ", c.gflops_fp64, " fp64, ", c.gflops_tf32, " tf32, ",
                         c.gflops_half, " 16-bit"));
  }
  return absl::OkStatus();
}

}  // namespace gpucompute::server
