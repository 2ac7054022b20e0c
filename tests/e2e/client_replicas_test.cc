// The C++ client over two replicas (ClientOptions::targets) against two real
// servers (CPU) with distinct --instance_name values: uploads and ops naming
// no tensor take turns over the replicas, and every call naming a tensor
// (operands, Download, Release, a Tensor's own calls, kept results) reaches
// the replica holding it, checked through each server's own ListTensors; an
// id of an instance no replica serves gets the server's NOT_FOUND naming it.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "gpucompute/client.h"
#include "support/server_process.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAreArray;

constexpr const char* kNames[2] = {"replica-a", "replica-b"};

class ClientReplicasTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (int i = 0; i < 2; ++i) {
      servers_[i] = new testing::ServerProcess(
          GPUCOMPUTE_SERVER_PATH, {"--backend=cpu", absl::StrCat("--instance_name=", kNames[i])});
    }
  }
  static void TearDownTestSuite() {
    for (testing::ServerProcess*& server : servers_) {
      delete server;
      server = nullptr;
    }
  }
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(servers_[i]->started());
      stubs_[i] = v1::Compute::NewStub(
          grpc::CreateChannel(servers_[i]->target(), grpc::InsecureChannelCredentials()));
    }
    ClientOptions options;
    options.targets = {servers_[0]->target(), servers_[1]->target()};
    absl::StatusOr<Client> client = Client::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_.emplace(std::move(*client));
  }
  void TearDown() override {
    for (int i = 0; i < 2; ++i) {
      if (stubs_[i] != nullptr) {
        EXPECT_THAT(Held(i), ::testing::IsEmpty()) << kNames[i];
      }
    }
  }

  // The ids server `i` holds, asked through a plain stub.
  std::vector<std::string> Held(int i) {
    grpc::ClientContext context;
    v1::ListTensorsResponse response;
    grpc::Status st = stubs_[i]->ListTensors(&context, v1::ListTensorsRequest(), &response);
    EXPECT_TRUE(st.ok()) << st.error_message();
    std::vector<std::string> ids;
    for (const v1::TensorInfo& t : response.tensors()) {
      EXPECT_EQ(t.server(), kNames[i]);
      ids.push_back(t.id());
    }
    return ids;
  }
  // The index of the server whose name ends `id`.
  static int Holder(const std::string& id) {
    for (int i = 0; i < 2; ++i) {
      if (id.size() > std::string(kNames[i]).size() &&
          id.substr(id.size() - std::string(kNames[i]).size() - 1) ==
              absl::StrCat("@", kNames[i])) {
        return i;
      }
    }
    return -1;
  }

  static testing::ServerProcess* servers_[2];
  std::unique_ptr<v1::Compute::Stub> stubs_[2];
  std::optional<Client> client_;
};
testing::ServerProcess* ClientReplicasTest::servers_[2] = {nullptr, nullptr};

MatMulOptions Keep() {
  MatMulOptions options;
  options.keep = true;
  return options;
}

Matrix Random(int64_t rows, int64_t cols, uint64_t seed) {
  absl::StatusOr<Matrix> m = Matrix::Random(DType::kFloat64, rows, cols, seed);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

TEST_F(ClientReplicasTest, UploadsTakeTurnsAndEachCallReachesItsTensor) {
  EXPECT_EQ(client_->targets().size(), 2u);
  EXPECT_EQ(client_->target(), servers_[0]->target());
  std::vector<Matrix> hosts;
  std::vector<Tensor> tensors;
  for (int i = 0; i < 4; ++i) {
    hosts.push_back(Random(5, 5, 100 + i));
    absl::StatusOr<Tensor> t = client_->Upload(hosts.back());
    ASSERT_TRUE(t.ok()) << t.status();
    tensors.push_back(std::move(*t));
  }
  // Uploads alternate: two on each server, each where its id says.
  std::vector<std::string> on[2];
  for (const Tensor& t : tensors) {
    const int h = Holder(t.id());
    ASSERT_GE(h, 0) << t.id();
    EXPECT_EQ(t.info().server(), kNames[h]);
    on[h].push_back(t.id());
  }
  EXPECT_EQ(on[0].size(), 2u);
  EXPECT_EQ(on[1].size(), 2u);
  EXPECT_NE(Holder(tensors[0].id()), Holder(tensors[1].id()));
  for (int i = 0; i < 2; ++i) EXPECT_THAT(Held(i), UnorderedElementsAreArray(on[i]));

  // Downloads through the handle and through the client, by id.
  for (size_t i = 0; i < tensors.size(); ++i) {
    absl::StatusOr<Matrix> got = tensors[i].Download();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(got->bytes() == hosts[i].bytes());
    got = client_->Download(tensors[i].id());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(got->bytes() == hosts[i].bytes());
  }

  // Ops on each tensor run on its holder: every one succeeds, whichever
  // replica is next in turn, and a kept result stays beside its operand.
  for (size_t i = 0; i < tensors.size(); ++i) {
    for (int repeat = 0; repeat < 2; ++repeat) {
      absl::StatusOr<OpResult> t = client_->Transpose(tensors[i]);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->output.rows(), 5);
      absl::StatusOr<OpResult> sum = client_->Reduce(Operand::TensorId(tensors[i].id()),
                                                     v1::REDUCE_OP_SUM, v1::REDUCE_AXIS_ALL);
      ASSERT_TRUE(sum.ok()) << sum.status();
    }
    absl::StatusOr<OpResult> kept = client_->MatMul(tensors[i], hosts[i], Keep());
    ASSERT_TRUE(kept.ok()) << kept.status();
    ASSERT_TRUE(kept->kept());
    EXPECT_EQ(Holder(kept->tensor.id()), Holder(tensors[i].id()));
    absl::StatusOr<Matrix> product = kept->tensor.Download();
    ASSERT_TRUE(product.ok()) << product.status();
    EXPECT_EQ(product->rows(), 5);
    // Released on its replica when the handle goes.
    ASSERT_TRUE(kept->tensor.Release().ok());
  }

  // Release by id groups the ids by replica.
  std::vector<std::string> ids;
  for (Tensor& t : tensors) ids.push_back(t.Detach());
  absl::StatusOr<v1::ReleaseTensorsResponse> released = client_->Release(ids);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(released->released(), 4);
}

TEST_F(ClientReplicasTest, OpsNamingNoTensorTakeTurnsAndKeepOnTheReplicaThatRan) {
  std::vector<OpResult> kept;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<OpResult> r = client_->MatMul(Random(3, 4, i), Random(4, 2, 10 + i), Keep());
    ASSERT_TRUE(r.ok()) << r.status();
    kept.push_back(std::move(*r));
  }
  for (int i = 0; i < 4; ++i) EXPECT_NE(Holder(kept[i].tensor.id()), -1);
  EXPECT_NE(Holder(kept[0].tensor.id()), Holder(kept[1].tensor.id()));
  EXPECT_NE(Holder(kept[2].tensor.id()), Holder(kept[3].tensor.id()));
  EXPECT_EQ(Held(0).size(), 2u);
  EXPECT_EQ(Held(1).size(), 2u);
  // ListTensors covers both replicas.
  absl::StatusOr<v1::ListTensorsResponse> all = client_->ListTensors();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->tensors_size(), 4);
  // Chained: a kept result as the next op's operand, on its replica.
  for (OpResult& r : kept) {
    absl::StatusOr<OpResult> t =
        client_->Transpose(r.tensor, OpOptions{.variant = "", .keep = true});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(Holder(t->tensor.id()), Holder(r.tensor.id()));
  }
  kept.clear();  // the handles release on their replicas
}

TEST_F(ClientReplicasTest, ALaterClientLearnsInstancesFromGetServerInfo) {
  // Tensors made through one client, named by id through a fresh one that
  // has asked no replica yet.
  absl::StatusOr<Tensor> a = client_->Upload(Random(2, 3, 1));
  absl::StatusOr<Tensor> b = client_->Upload(Random(2, 3, 2));
  ASSERT_TRUE(a.ok() && b.ok());
  ClientOptions options;
  options.targets = {servers_[1]->target(), servers_[0]->target()};
  absl::StatusOr<Client> other = Client::Create(options);
  ASSERT_TRUE(other.ok()) << other.status();
  for (const Tensor* t : {&*a, &*b}) {
    absl::StatusOr<OpResult> r = other->Transpose(Operand::TensorId(t->id()));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->output.rows(), 3);
    absl::StatusOr<Matrix> m = other->Download(t->id());
    ASSERT_TRUE(m.ok()) << m.status();
  }
  absl::StatusOr<v1::ReleaseTensorsResponse> released = other->Release({a->Detach(), b->Detach()});
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(released->released(), 2);
}

TEST_F(ClientReplicasTest, AnIdOfAnUnknownInstanceGetsTheServersNotFound) {
  const std::string id = "0123456789abcdef0123456789abcdef@replica-z";
  absl::StatusOr<OpResult> r = client_->Transpose(Operand::TensorId(id));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("held by instance \"replica-z\""));
  absl::StatusOr<Matrix> m = client_->Download(id);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(m.status().message(), HasSubstr("replica-z"));
  absl::StatusOr<v1::ReleaseTensorsResponse> released = client_->Release({id});
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(released->released(), 0);
}

TEST_F(ClientReplicasTest, OneTargetWorksAsBefore) {
  ClientOptions options;
  options.target = servers_[1]->target();
  absl::StatusOr<Client> one = Client::Create(options);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->targets(), std::vector<std::string>{servers_[1]->target()});
  absl::StatusOr<Tensor> t = one->Upload(Random(2, 2, 3));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Holder(t->id()), 1);
  absl::StatusOr<OpResult> r = one->Transpose(*t);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(t->Release().ok());
}

}  // namespace
}  // namespace gpucompute
