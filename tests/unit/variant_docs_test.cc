// The README's variant table names exactly the variants each ladder table
// declares, in ladder order. CUDA names are read from the ladder sources
// (kernels/cuda/<op>/ladder.cc), so a CPU-only build checks them too; a CUDA
// build also checks those sources against the registry. CPU names come from
// the registry.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
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

Names AllMatches(const std::string& text, const std::regex& pattern) {
  Names out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pattern);
       it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1]);
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
    const std::regex backticked("`([a-z0-9_]+)`");
    row.cuda = AllMatches(cells[2], backticked);
    row.cpu = AllMatches(cells[3], backticked);
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
  const std::regex row_name(R"re(\.name\s*=\s*"([^"]+)")re");
  for (const OpDocs& doc : kOps) {
    SCOPED_TRACE(doc.readme_title);
    const ReadmeRow row = ReadmeVariants(readme, doc.readme_title);
    const Names ladder = AllMatches(ReadSource(doc.ladder_source), row_name);
    EXPECT_FALSE(ladder.empty()) << "no `.name = \"...\"` rows in " << doc.ladder_source;
    EXPECT_EQ(row.cuda, ladder) << "README's CUDA variants vs " << doc.ladder_source;
    if (BuiltWithCuda()) {
      EXPECT_EQ(Registered(doc.op, Backend::kCuda), ladder)
          << "registered CUDA variants vs the rows read from " << doc.ladder_source;
    }
    EXPECT_EQ(row.cpu, Registered(doc.op, Backend::kCpu)) << "README's CPU variants";
  }
}

}  // namespace
}  // namespace gpucompute::kernels
