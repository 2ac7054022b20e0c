// A Client's channels: targets, TLS, bearer token, channel arguments and replicas.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client_core.h"
#include "gpucompute/client.h"

namespace gpucompute {

namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", what, " '", path, "': ", std::strerror(errno)));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat("error reading ", what, " '", path, "'"));
  }
  return std::move(contents).str();
}

// A PEM file's contents, or why it is not one: gRPC would otherwise log the
// failure and report every call UNAVAILABLE.
absl::StatusOr<std::string> ReadPemFile(const std::string& path, const char* what) {
  absl::StatusOr<std::string> contents = ReadWholeFile(path, what);
  if (contents.ok() && !absl::StrContains(*contents, "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", path, "' holds no PEM block (-----BEGIN ...-----)"));
  }
  return contents;
}

// A target without a scheme is HOST:PORT, the port 1 to 65535: gRPC would
// take a port past 65535 modulo 65536, and an empty one as 443.
absl::Status CheckHostPort(const std::string& target) {
  for (const char* scheme :
       {"dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:", "vsock:", "xds:"}) {
    if (absl::StartsWith(target, scheme)) return absl::OkStatus();
  }
  const size_t colon = target.rfind(':');
  const std::string host = colon == std::string::npos ? "" : target.substr(0, colon);
  int port = 0;
  if (host.empty() || absl::StrContains(host, ",") ||
      !absl::SimpleAtoi(absl::string_view(target).substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("server address \"", target,
                     "\" is not HOST:PORT with a port of 1 to 65535 (nor unix:/PATH or another "
                     "gRPC target)"));
  }
  return absl::OkStatus();
}

}  // namespace

void ApplyLargeMessageTransport(grpc::ChannelArguments* args) {
  // HTTP/2's largest frame: a 64 MiB matrix in 4 frames instead of 4096.
  args->SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, (1 << 24) - 1);
  // Let a whole matrix be in flight before the first WINDOW_UPDATE instead of
  // waiting for the BDP estimator to grow the window from 64 KiB.
  args->SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20);
  // Read the socket in MiB chunks, not 8 KiB ones: fewer syscalls and slices.
  args->SetInt(GRPC_ARG_TCP_READ_CHUNK_SIZE, 4 << 20);
  args->SetInt(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, 256 << 10);
  args->SetInt(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 16 << 20);
}

Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;
Client::~Client() = default;

std::string WithDefaultPort(const std::string& target) {
  std::string prefix, host = target;
  for (const char* scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(target, scheme)) {
      prefix = scheme;
      host = target.substr(prefix.size());
      break;
    }
  }
  if (prefix.empty() && target.find(':') != std::string::npos && target.front() != '[') {
    return target;  // host:port, unix:/path, or another scheme
  }
  if (host.empty() || host.find(',') != std::string::npos) return target;
  const size_t bracket = host.rfind(']');
  const size_t colon = host.rfind(':');
  const bool has_port = host.front() == '[' ? bracket != std::string::npos &&
                                                  colon != std::string::npos && colon > bracket
                                            : colon != std::string::npos;
  if (has_port) return target;
  return absl::StrCat(prefix, host, ":", kDefaultPort);
}

absl::StatusOr<Client> Client::Create(const ClientOptions& given) {
  ClientOptions options = given;
  std::vector<std::string> targets = given.targets;
  if (targets.empty()) targets.push_back(given.target);
  for (std::string& target : targets) {
    if (target.empty()) return absl::InvalidArgumentError("client target is empty");
    target = WithDefaultPort(target);
    if (absl::Status s = CheckHostPort(target); !s.ok()) return s;
  }
  options.target = targets.front();
  if (options.deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("client deadline must be positive, got ",
                                                   absl::FormatDuration(options.deadline)));
  }
  if (!options.bearer_token.empty() && !options.bearer_token_file.empty()) {
    return absl::InvalidArgumentError("give the bearer token as a string or a file, not both");
  }
  if (options.connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("client connections must be at least 1, got ", options.connections));
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "mutual TLS needs both a client certificate and its private key");
  }

  if (!options.lb_policy.empty() && options.lb_policy != "pick_first" &&
      options.lb_policy != "round_robin") {
    return absl::InvalidArgumentError(
        absl::StrCat("load-balancing policy must be pick_first or round_robin, got \"",
                     options.lb_policy, "\""));
  }

  Client client;
  client.target_ = options.target;
  client.targets_ = targets;
  client.deadline_ = options.deadline;

  std::string token = options.bearer_token;
  if (!options.bearer_token_file.empty()) {
    absl::StatusOr<std::string> contents =
        ReadWholeFile(options.bearer_token_file, "bearer token file");
    if (!contents.ok()) return contents.status();
    // The first line, as the server reads its --auth_token_file.
    token = std::string(absl::StripAsciiWhitespace(contents->substr(0, contents->find('\n'))));
    if (token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bearer token file '", options.bearer_token_file, "' is empty"));
    }
  }
  if (!token.empty()) client.authorization_ = absl::StrCat("Bearer ", token);

  const bool tls = options.use_tls || !options.tls_root_ca_file.empty() ||
                   !options.tls_cert_file.empty() || !options.tls_server_name.empty();
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (tls) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_root_ca_file.empty()) {
      absl::StatusOr<std::string> ca = ReadPemFile(options.tls_root_ca_file, "TLS root CA file");
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = std::move(*ca);
    }
    if (!options.tls_cert_file.empty()) {
      absl::StatusOr<std::string> cert =
          ReadPemFile(options.tls_cert_file, "TLS client certificate file");
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadPemFile(options.tls_key_file, "TLS client key file");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = std::move(*cert);
      ssl.pem_private_key = std::move(*key);
    }
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  if (!options.lb_policy.empty()) {
    args.SetServiceConfigJSON(
        absl::StrCat(R"({"loadBalancingConfig":[{")", options.lb_policy, R"(":{}}]})"));
  }
  if (options.large_message_transport) ApplyLargeMessageTransport(&args);
  // Otherwise channels with equal arguments share one connection.
  if (options.connections > 1) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto replicas = std::make_shared<internal::Replicas>();
  replicas->targets = targets;
  replicas->balanced = options.lb_policy == "round_robin";
  for (const std::string& target : targets) {
    auto replica = std::make_unique<internal::Replica>();
    for (int i = 0; i < options.connections; ++i) {
      replica->channels.push_back(grpc::CreateCustomChannel(target, credentials, args));
      replica->generic_stubs.push_back(
          std::make_unique<grpc::GenericStub>(replica->channels.back()));
    }
    auto core = std::make_shared<internal::ClientCore>();
    core->target = target;
    core->deadline = client.deadline_;
    core->authorization = client.authorization_;
    core->busy_poll = options.busy_poll;
    core->channel = replica->channels.front();
    core->stub = v1::Compute::NewStub(core->channel);
    replica->core = std::move(core);
    replicas->list.push_back(std::move(replica));
  }
  client.channels_ = (*replicas)[0].channels;
  client.stub_ = v1::Compute::NewStub(client.channels_.front());
  client.max_message_bytes_ = options.max_message_bytes;
  client.core_ = (*replicas)[0].core;
  client.replicas_ = std::move(replicas);
  return client;
}

size_t Client::Route(const std::string& tensor_id, bool shared_memory) const {
  if (!tensor_id.empty()) {
    const std::string instance = internal::InstanceOf(tensor_id);
    return replicas_->Index(instance, instance.empty() ? instance : WithDefaultPort(instance));
  }
  return shared_memory ? 0 : replicas_->Any();
}

void Client::Prepare(grpc::ClientContext* context) const { core_->Prepare(context); }

absl::Status Client::Finish(const char* method, const grpc::Status& status) const {
  return core_->Finish(method, status);
}

}  // namespace gpucompute
