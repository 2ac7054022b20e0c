// The fixture base of client-level end-to-end suites: one server process per
// suite, started with the deriving fixture's `static std::vector<std::string>
// ServerFlags()`, and a fresh Client on it for every test.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpucompute/client.h"
#include "support/server_process.h"

namespace gpucompute::testing {

// `Suite` is the deriving fixture (one server per suite). The test target
// defines GPUCOMPUTE_SERVER_PATH.
template <typename Suite>
class ClientSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess(GPUCOMPUTE_SERVER_PATH, Suite::ServerFlags());
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(server_->started()) << "server did not start";
    ClientOptions options;
    options.target = server_->target();
    absl::StatusOr<Client> client = Client::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_.emplace(std::move(*client));
  }

  static inline ServerProcess* server_ = nullptr;
  std::optional<Client> client_;
};

}  // namespace gpucompute::testing
