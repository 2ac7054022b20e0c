#include "server/grpc/auth.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/grpc/credentials.h"

namespace gpucompute::server {
namespace {

constexpr char kScheme[] = "bearer ";  // RFC 7235: the scheme is case-insensitive

}  // namespace

bool ConstantTimeEquals(const std::string& expected, grpc::string_ref presented) {
  unsigned char diff = expected.size() != presented.size() ? 1 : 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char other = i < presented.size() ? presented.data()[i] : 0;
    diff |= static_cast<unsigned char>(expected[i]) ^ other;
  }
  return diff == 0;
}

absl::StatusOr<BearerTokenAuth> BearerTokenAuth::FromFile(const std::string& path) {
  auto text = ReadFileForFlag(path, "--auth_token_file");
  if (!text.ok()) return text.status();
  const std::string first_line = text->substr(0, text->find('\n'));
  auto auth = FromToken(std::string(absl::StripAsciiWhitespace(first_line)));
  if (!auth.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auth_token_file: ", path, ": ", auth.status().message()));
  }
  return auth;
}

absl::StatusOr<BearerTokenAuth> BearerTokenAuth::FromToken(std::string token) {
  if (token.empty()) return absl::InvalidArgumentError("the token (first line) is empty");
  // What a client can send in an HTTP/2 header value after "Bearer ".
  for (unsigned char c : token) {
    if (c <= 0x20 || c >= 0x7f) {
      return absl::InvalidArgumentError(
          "the token must be printable ASCII without spaces (e.g. base64 of random bytes)");
    }
  }
  return BearerTokenAuth(std::move(token));
}

absl::Status BearerTokenAuth::Check(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  const auto [begin, end] = metadata.equal_range("authorization");
  if (begin == end) {
    return absl::UnauthenticatedError(
        "this server requires a token: send metadata \"authorization: Bearer <token>\"");
  }
  if (std::next(begin) != end) {
    return absl::UnauthenticatedError("more than one \"authorization\" metadata entry");
  }
  const grpc::string_ref value = begin->second;
  const size_t scheme_length = sizeof(kScheme) - 1;
  if (value.size() <= scheme_length ||
      !absl::EqualsIgnoreCase(absl::string_view(value.data(), scheme_length), kScheme)) {
    return absl::UnauthenticatedError("\"authorization\" metadata must read \"Bearer <token>\"");
  }
  if (!ConstantTimeEquals(token_, value.substr(scheme_length))) {
    return absl::UnauthenticatedError("invalid bearer token");
  }
  return absl::OkStatus();
}

}  // namespace gpucompute::server
