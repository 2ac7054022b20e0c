// Transport security of the gRPC port: plaintext, TLS, or mutual TLS, from
// PEM files named by flags. The files are checked when the server starts
// (readable, parseable, key matching certificate) so that a mistake stops
// the server with a clear message instead of failing every handshake.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace gpucompute::server {

struct TlsFiles {
  std::string cert;       // server certificate chain (PEM); empty: plaintext
  std::string key;        // its private key (PEM)
  std::string client_ca;  // CA bundle (PEM); set: clients must present a certificate it signed
};

struct ServerSecurity {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  std::string description;  // "plaintext", "TLS" or "mutual TLS", for the start-up log
};

absl::StatusOr<ServerSecurity> MakeServerSecurity(const TlsFiles& files);

// Reads a whole file; errors name `what` (e.g. "--tls_cert") and the path.
absl::StatusOr<std::string> ReadFileForFlag(const std::string& path, const std::string& what);

}  // namespace gpucompute::server
