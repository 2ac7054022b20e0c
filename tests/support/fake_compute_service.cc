#include "support/fake_compute_service.h"

#include <chrono>
#include <climits>
#include <cstring>
#include <thread>
#include <vector>

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/server_context.h>

namespace gpucompute::testing {
namespace {

std::vector<double> Values(const v1::Matrix& m) {
  std::vector<double> out(m.rows() * m.cols());
  for (size_t i = 0; i < out.size(); ++i) {
    if (m.dtype() == v1::DTYPE_FLOAT32) {
      out[i] = reinterpret_cast<const float*>(m.data().data())[i];
    } else {
      out[i] = reinterpret_cast<const double*>(m.data().data())[i];
    }
  }
  return out;
}

void SetValues(v1::DType dtype, int64_t rows, int64_t cols, const std::vector<double>& values,
               v1::Matrix* out) {
  out->set_dtype(dtype);
  out->set_rows(rows);
  out->set_cols(cols);
  std::string* data = out->mutable_data();
  if (dtype == v1::DTYPE_FLOAT32) {
    std::vector<float> f(values.begin(), values.end());
    data->assign(reinterpret_cast<const char*>(f.data()), f.size() * sizeof(float));
  } else {
    data->assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(double));
  }
}

void FillReport(const std::string& variant, v1::ExecutionReport* report) {
  report->set_variant(variant.empty() ? "fake_naive" : variant);
  report->set_device("fake");
  report->set_queue_us(1);
  report->set_upload_us(2);
  report->set_compute_us(3);
  report->set_download_us(4);
  report->set_total_us(10);
}

}  // namespace

void FakeComputeService::Record(grpc::ServerContext* context) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = context->client_metadata().find("authorization");
  last_authorization_ = it == context->client_metadata().end()
                            ? ""
                            : std::string(it->second.data(), it->second.size());
}

std::string FakeComputeService::last_authorization() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_authorization_;
}

void FakeComputeService::set_profile_response(const v1::ProfileResponse& response) {
  std::lock_guard<std::mutex> lock(mu_);
  profile_response_ = response;
}

void FakeComputeService::set_server_info_status(const grpc::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  server_info_status_ = status;
}

v1::ProfileRequest FakeComputeService::last_profile_request() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_profile_request_;
}

grpc::Status FakeComputeService::MatMul(grpc::ServerContext* context,
                                        const v1::MatMulRequest* request,
                                        v1::MatMulResponse* response) {
  Record(context);
  const v1::Matrix& a = request->a();
  const v1::Matrix& b = request->b();
  if (a.cols() != b.rows()) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "a.cols " + std::to_string(a.cols()) + " != b.rows " + std::to_string(b.rows())};
  }
  if (request->variant() == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(500));
  if (request->variant() == "malformed") {
    response->mutable_c()->set_dtype(v1::DTYPE_FLOAT32);
    response->mutable_c()->set_rows(a.rows());
    response->mutable_c()->set_cols(b.cols());
    response->mutable_c()->set_data("abc");
    return grpc::Status::OK;
  }
  const std::vector<double> av = Values(a), bv = Values(b);
  std::vector<double> c(a.rows() * b.cols(), 0.0);
  for (int64_t i = 0; i < a.rows(); ++i) {
    for (int64_t p = 0; p < a.cols(); ++p) {
      for (int64_t j = 0; j < b.cols(); ++j)
        c[i * b.cols() + j] += av[i * a.cols() + p] * bv[p * b.cols() + j];
    }
  }
  SetValues(a.dtype(), a.rows(), b.cols(), c, response->mutable_c());
  FillReport(request->variant(), response->mutable_report());
  return grpc::Status::OK;
}

grpc::Status FakeComputeService::Transpose(grpc::ServerContext* context,
                                           const v1::TransposeRequest* request,
                                           v1::TransposeResponse* response) {
  Record(context);
  const v1::Matrix& in = request->input();
  const int64_t elem = in.dtype() == v1::DTYPE_FLOAT32 ? 4 : 8;
  v1::Matrix* out = response->mutable_output();
  out->set_dtype(in.dtype());
  out->set_rows(in.cols());
  out->set_cols(in.rows());
  std::string* data = out->mutable_data();
  data->resize(in.data().size());
  for (int64_t r = 0; r < in.rows(); ++r) {
    for (int64_t c = 0; c < in.cols(); ++c) {
      std::memcpy(data->data() + (c * in.rows() + r) * elem,
                  in.data().data() + (r * in.cols() + c) * elem, elem);
    }
  }
  FillReport(request->variant(), response->mutable_report());
  return grpc::Status::OK;
}

grpc::Status FakeComputeService::Reduce(grpc::ServerContext* context,
                                        const v1::ReduceRequest* request,
                                        v1::ReduceResponse* response) {
  Record(context);
  if (request->op() != v1::REDUCE_OP_SUM || request->axis() != v1::REDUCE_AXIS_ALL) {
    return {grpc::StatusCode::UNIMPLEMENTED, "the fake only sums over all elements"};
  }
  double sum = 0;
  for (double v : Values(request->input())) sum += v;
  SetValues(request->input().dtype(), 1, 1, {sum}, response->mutable_output());
  FillReport(request->variant(), response->mutable_report());
  return grpc::Status::OK;
}

grpc::Status FakeComputeService::Profile(grpc::ServerContext* context,
                                         const v1::ProfileRequest* request,
                                         v1::ProfileResponse* response) {
  Record(context);
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_profile_request_ = *request;
    if (profile_response_) {
      *response = *profile_response_;
      return grpc::Status::OK;
    }
  }
  v1::VariantProfile* fast = response->add_variants();
  fast->set_variant("fake_fast");
  fast->set_ok(true);
  fast->set_median_us(12.5);
  fast->set_gbytes_per_s(100);
  fast->set_gflops(2.0 * request->m() * request->n() * request->k() / 12.5e3);
  fast->set_fraction_of_roofline(0.5);
  fast->set_max_rel_error(1e-7);
  v1::VariantProfile* broken = response->add_variants();
  broken->set_variant("fake_broken");
  broken->set_ok(false);
  broken->set_error("result differs from the reference at (0, 0)");
  response->set_selected("fake_fast");
  response->set_device("fake");
  response->set_peak_gbytes_per_s(200);
  response->set_peak_gflops(1000);
  return grpc::Status::OK;
}

grpc::Status FakeComputeService::GetServerInfo(grpc::ServerContext* context,
                                               const v1::ServerInfoRequest*,
                                               v1::ServerInfo* response) {
  Record(context);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (server_info_status_) return *server_info_status_;
  }
  response->set_version("fake-1");
  response->set_backend("cpu");
  v1::DeviceInfo* dev = response->add_devices();
  dev->set_name("fake");
  dev->set_memory_bytes(1LL << 30);
  dev->set_multiprocessors(4);
  dev->set_healthy(true);
  v1::VariantInfo* v = response->add_variants();
  v->set_op(v1::OP_MATMUL);
  v->set_name("fake_naive");
  v->set_description("triple loop");
  v->add_dtypes(v1::DTYPE_FLOAT32);
  v->add_dtypes(v1::DTYPE_FLOAT64);
  response->set_max_matrix_bytes(1LL << 30);
  return grpc::Status::OK;
}

std::unique_ptr<FakeServer> FakeServer::Start() {
  auto fake = std::make_unique<FakeServer>();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(INT_MAX);
  builder.SetMaxSendMessageSize(INT_MAX);
  builder.RegisterService(&fake->service);
  fake->server = builder.BuildAndStart();
  if (fake->server == nullptr || port == 0) return nullptr;
  fake->address = "127.0.0.1:" + std::to_string(port);
  return fake;
}

FakeServer::~FakeServer() {
  if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

}  // namespace gpucompute::testing
