// The README's variant table names exactly the variants each ladder table
// declares, in ladder order. CUDA names are read from the ladder sources
// (kernels/cuda/<op>/ladder.cc), so a CPU-only build checks them too; a CUDA
// build also checks those sources against the registry. CPU names come from
// the registry.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gpucompute/kernels/registry.h"

namespace gpucompute::kernels {
namespace {

using Names = std::vector<std::string>;

std::string ReadSource(const std::string& relative) {
  const std::string path = std::string(GPUCOMPUTE_SOURCE_DIR) + "/" + relative;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every `name` between backticks in a README cell.
Names Backticked(const std::string& text) {
  Names out;
  for (size_t open = text.find('`'); open != std::string::npos;) {
    const size_t close = text.find('`', open + 1);
    if (close == std::string::npos) break;
    out.push_back(text.substr(open + 1, close - open - 1));
    open = text.find('`', close + 1);
  }
  return out;
}

// The value of every `.name = "..."` in a ladder source, in order.
Names LadderRowNames(const std::string& source) {
  Names out;
  for (size_t at = source.find(".name"); at != std::string::npos;
       at = source.find(".name", at + 1)) {
    size_t i = at + 5;
    while (i < source.size() && (source[i] == ' ' || source[i] == '\n')) ++i;
    if (i >= source.size() || source[i] != '=') continue;
    const size_t open = source.find('"', i);
    const size_t close = open == std::string::npos ? open : source.find('"', open + 1);
    if (close == std::string::npos) break;
    out.push_back(source.substr(open + 1, close - open - 1));
  }
  return out;
}

// The rows of a ladder source that set `.requires_sm90a = true`: the
// registry leaves them out where a device could not run sm_90a code.
Names Sm90aRowNames(const std::string& source) {
  Names out;
  const Names names = LadderRowNames(source);
  size_t row = source.find(".name");
  for (const std::string& name : names) {
    const size_t next = source.find(".name", row + 1);
    const size_t flag = source.find(".requires_sm90a = true", row);
    if (flag != std::string::npos && flag < next) out.push_back(name);
    row = next;
  }
  return out;
}

// The README table row of one op: "| MatMul | `naive`, ... | `cpu_reference` |".
struct ReadmeRow {
  Names cuda, cpu;
};

ReadmeRow ReadmeVariants(const std::string& readme, const std::string& op_title) {
  ReadmeRow row;
  std::istringstream lines(readme);
  std::string line;
  int found = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("| " + op_title + " |", 0) != 0) continue;
    ++found;
    std::vector<std::string> cells;
    std::istringstream parts(line);
    std::string cell;
    while (std::getline(parts, cell, '|')) cells.push_back(cell);
    // "", " MatMul ", " CUDA names ", " CPU names "
    if (cells.size() < 4) {
      ADD_FAILURE() << "README row without CUDA and CPU cells: " << line;
      continue;
    }
    row.cuda = Backticked(cells[2]);
    row.cpu = Backticked(cells[3]);
  }
  EXPECT_EQ(found, 1) << "README rows starting with \"| " << op_title << " |\"";
  return row;
}

Names Registered(Op op, Backend backend) {
  Names out;
  for (const Variant* v : DefaultRegistry().List(op, backend)) out.push_back(v->name);
  return out;
}

struct OpDocs {
  Op op;
  const char* readme_title;
  const char* ladder_source;
};

constexpr OpDocs kOps[] = {
    {Op::kMatMul, "MatMul", "kernels/cuda/matmul/ladder.cc"},
    {Op::kTranspose, "Transpose", "kernels/cuda/transpose/ladder.cc"},
    {Op::kReduce, "Reduce", "kernels/cuda/reduce/ladder.cc"},
};

TEST(VariantDocs, ReadmeTableListsExactlyTheLadders) {
  const std::string readme = ReadSource("README.md");
  for (const OpDocs& doc : kOps) {
    SCOPED_TRACE(doc.readme_title);
    const ReadmeRow row = ReadmeVariants(readme, doc.readme_title);
    const Names ladder = LadderRowNames(ReadSource(doc.ladder_source));
    EXPECT_FALSE(ladder.empty()) << "no `.name = \"...\"` rows in " << doc.ladder_source;
    EXPECT_EQ(row.cuda, ladder) << "README's CUDA variants vs " << doc.ladder_source;
    if (BuiltWithCuda()) {
      // All rows, or all but the sm_90a ones (no device, or not Hopper).
      const Names sm90a = Sm90aRowNames(ReadSource(doc.ladder_source));
      Names portable;
      for (const std::string& name : ladder) {
        if (std::find(sm90a.begin(), sm90a.end(), name) == sm90a.end()) portable.push_back(name);
      }
      const Names registered = Registered(doc.op, Backend::kCuda);
      EXPECT_TRUE(registered == ladder || registered == portable)
          << "registered CUDA variants vs the rows read from " << doc.ladder_source << ": "
          << ::testing::PrintToString(registered);
    }
    EXPECT_EQ(row.cpu, Registered(doc.op, Backend::kCpu)) << "README's CPU variants";
  }
}

}  // namespace
}  // namespace gpucompute::kernels
