#include "server/grpc/credentials.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "server/ops/log.h"

namespace gpucompute::server {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

// Encrypted keys are refused instead of OpenSSL prompting on a terminal.
int NoPassphrase(char*, int, int, void*) { return 0; }

Bio MemoryBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The last OpenSSL error as text, clearing the queue.
std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no PEM block found";
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

// Every certificate in a PEM bundle, in order.
absl::StatusOr<std::vector<Cert>> ParseCertificates(const std::string& pem, const std::string& what,
                                                    const std::string& path) {
  std::vector<Cert> certs;
  Bio bio = MemoryBio(pem);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr))
    certs.emplace_back(x);
  ERR_clear_error();  // the read past the last block always "fails"
  if (certs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", path, " holds no PEM certificate (\"-----BEGIN CERTIFICATE-----\")"));
  }
  return certs;
}

void WarnIfOutsideValidity(X509* cert, const std::string& what, const std::string& path) {
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
    LogError(absl::StrCat("warning: ", what, ": the certificate in ", path,
                          " has expired; clients will refuse it"));
  } else if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
    LogError(absl::StrCat("warning: ", what, ": the certificate in ", path,
                          " is not valid yet; clients will refuse it"));
  }
}

}  // namespace

absl::StatusOr<std::string> ReadFileForFlag(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": cannot read ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::FailedPreconditionError(absl::StrCat(what, ": error reading ", path));
  return text.str();
}

absl::StatusOr<ServerSecurity> MakeServerSecurity(const TlsFiles& files) {
  if (files.cert.empty() && files.key.empty()) {
    if (!files.client_ca.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca needs TLS: give --tls_cert and --tls_key as well");
    }
    return ServerSecurity{grpc::InsecureServerCredentials(), "plaintext"};
  }
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls_cert and --tls_key");
  }

  auto cert_pem = ReadFileForFlag(files.cert, "--tls_cert");
  if (!cert_pem.ok()) return cert_pem.status();
  auto key_pem = ReadFileForFlag(files.key, "--tls_key");
  if (!key_pem.ok()) return key_pem.status();
  auto chain = ParseCertificates(*cert_pem, "--tls_cert", files.cert);
  if (!chain.ok()) return chain.status();
  Bio key_bio = MemoryBio(*key_pem);
  Key key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr));
  if (!key) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key: ", files.key, " holds no unencrypted PEM private key: ", OpenSslError()));
  }
  if (X509_check_private_key(chain->front().get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("--tls_key: the key in ", files.key,
                                                   " does not match the certificate in ",
                                                   files.cert, " (--tls_cert)"));
  }
  WarnIfOutsideValidity(chain->front().get(), "--tls_cert", files.cert);

  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({*key_pem, *cert_pem});
  ServerSecurity security;
  if (files.client_ca.empty()) {
    options.client_certificate_request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
    security.description = "TLS";
  } else {
    auto ca_pem = ReadFileForFlag(files.client_ca, "--tls_client_ca");
    if (!ca_pem.ok()) return ca_pem.status();
    auto cas = ParseCertificates(*ca_pem, "--tls_client_ca", files.client_ca);
    if (!cas.ok()) return cas.status();
    options.pem_root_certs = *ca_pem;
    // Mutual TLS: the handshake fails unless the client presents a
    // certificate that chains to one of these CAs.
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    security.description = absl::StrCat("mutual TLS (", cas->size(), " client CA certificate",
                                        cas->size() == 1 ? "" : "s", ")");
  }
  security.credentials = grpc::SslServerCredentials(options);
  return security;
}

}  // namespace gpucompute::server
