// Optional bearer-token authentication of Compute calls. The token is the
// first line of a file; a call is admitted when its metadata carries
// "authorization: Bearer <token>". Health and reflection are separate
// services and never check it, so probes work without the secret.
#pragma once

#include <grpcpp/support/string_ref.h>

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpucompute::server {

class BearerTokenAuth {
 public:
  // The file's first line, without surrounding whitespace, is the token.
  static absl::StatusOr<BearerTokenAuth> FromFile(const std::string& path);
  static absl::StatusOr<BearerTokenAuth> FromToken(std::string token);

  // OK, or UNAUTHENTICATED saying what was wrong (never echoing a token).
  absl::Status Check(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;

 private:
  explicit BearerTokenAuth(std::string token) : token_(std::move(token)) {}
  std::string token_;
};

// Equality whose running time depends only on `expected`'s length, so a
// caller cannot find the token byte by byte from response times.
bool ConstantTimeEquals(const std::string& expected, grpc::string_ref presented);

}  // namespace gpucompute::server
