// Tensors: matrices held on the server between calls (Upload, or an op's
// output kept), in device memory on a GPU and host memory on the CPU. The
// store names them, lists them, lets them expire when idle and keeps their
// bytes under a budget. Knows nothing of gRPC.
//
// Ownership is shared: the store holds one reference while a tensor is
// listed, and each upload, download or op using it holds another, so a
// tensor released or expired while an op reads it is freed when the op ends.
// Its bytes count against the budget from Create until that moment.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gpucompute/kernels/problem.h"
#include "server/engine/device.h"

namespace gpucompute::server {

struct TensorShape {
  kernels::DType dtype = kernels::DType::kFloat32;
  int64_t rows = 0;
  int64_t cols = 0;
  // rows * cols * element size (the caller has checked it fits int64).
  int64_t bytes() const { return rows * cols * kernels::ElementSize(dtype); }
};

// What the store tells about one tensor.
struct TensorInfo {
  std::string id;
  TensorShape shape;
  int64_t bytes = 0;
  std::string device;  // the holding device's name
  absl::Time expires = absl::InfiniteFuture();
  std::string server;  // the instance holding it
};

// Budget accounting shared by the store and its tensors, so that a tensor an
// op still holds can give its bytes back even after the store is gone.
class TensorLedger;

class Tensor {
 public:
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor();  // frees the memory, then returns its bytes to the budget

  const std::string& id() const { return id_; }
  const TensorShape& shape() const { return shape_; }
  int64_t bytes() const { return shape_.bytes(); }
  Device& device() const { return device_; }
  ResidentMemory& memory() const { return *memory_; }

 private:
  friend class TensorStore;
  Tensor(std::string id, TensorShape shape, Device& device, std::unique_ptr<ResidentMemory> memory,
         std::shared_ptr<TensorLedger> ledger)
      : id_(std::move(id)),
        shape_(shape),
        device_(device),
        memory_(std::move(memory)),
        ledger_(std::move(ledger)) {}

  // When an op or a transfer last used the tensor (Unix nanoseconds): its
  // idle lifetime runs from here. Atomic, so that a use takes no lock.
  void MarkUsed(absl::Time now) const {
    last_used_ns_.store(absl::ToUnixNanos(now), std::memory_order_relaxed);
  }
  absl::Time last_used() const {
    return absl::FromUnixNanos(last_used_ns_.load(std::memory_order_relaxed));
  }

  const std::string id_;
  const TensorShape shape_;
  Device& device_;
  std::unique_ptr<ResidentMemory> memory_;
  std::shared_ptr<TensorLedger> ledger_;
  mutable std::atomic<int64_t> last_used_ns_{0};
};

struct TensorStoreOptions {
  int64_t limit_bytes = 0;                         // --tensor_memory_bytes
  absl::Duration default_ttl = absl::Minutes(10);  // --tensor_ttl
  std::string instance;                            // --instance_name: ids end in "@<instance>"
  absl::Duration max_ttl = absl::Hours(24);        // --max_tensor_ttl
};

struct TensorCounters {
  int64_t held_bytes = 0;  // every tensor alive: listed, uploading, or released but in use
  int64_t limit_bytes = 0;
  int64_t tensors = 0;  // listed now
  int64_t created = 0;  // listed since start
  int64_t expired = 0;  // unlisted by the idle lifetime since start
};

class TensorStore {
 public:
  // Starts the thread that expires idle tensors: it runs whether or not any
  // request arrives.
  explicit TensorStore(TensorStoreOptions options);
  ~TensorStore();  // stops the thread and unlists every tensor
  TensorStore(const TensorStore&) = delete;
  TensorStore& operator=(const TensorStore&) = delete;

  // A new tensor on `device`, not yet listed: charges its bytes to the
  // budget (RESOURCE_EXHAUSTED giving held, asked and limit bytes), then
  // takes the device's memory (waiting until `deadline` for it). The caller
  // fills it and lists it with Add; dropped unlisted, it frees itself.
  absl::StatusOr<std::shared_ptr<Tensor>> Create(Device& device, const TensorShape& shape,
                                                 absl::Time deadline);

  // Lists `tensor` under its id with an idle lifetime of `ttl` (zero or
  // less: the default).
  TensorInfo Add(std::shared_ptr<Tensor> tensor, absl::Duration ttl);

  // The listed tensor `id`, its idle lifetime renewed. NOT_FOUND naming the
  // id (and `field`, the request field that named it) when it is unknown,
  // released or expired, or naming the instance that holds it when the id
  // is another instance's.
  absl::StatusOr<std::shared_ptr<Tensor>> Use(const std::string& id, const std::string& field);
  // Renews the idle lifetime of `tensor`: a use that lasted longer than its
  // lifetime still counts as a use at its end. Takes no lock.
  static void Touch(const Tensor& tensor) { tensor.MarkUsed(absl::Now()); }

  struct Released {
    int64_t count = 0;
    int64_t bytes = 0;
  };
  // Unlists the ids this store holds (others are skipped); each one's memory
  // is freed once no op or download still uses it.
  Released Release(const std::vector<std::string>& ids);

  std::vector<TensorInfo> List() const;
  // `tensor`'s info; its deadline is the listed one (none when unlisted).
  TensorInfo InfoOf(const Tensor& tensor) const;

  // Of `devices`, the healthy one holding the fewest tensor bytes (null if
  // none is healthy): where a new upload goes.
  Device* PlaceNew(const std::vector<std::unique_ptr<Device>>& devices) const;

  TensorCounters counters() const;
  int64_t limit_bytes() const { return options_.limit_bytes; }
  absl::Duration default_ttl() const { return options_.default_ttl; }
  absl::Duration max_ttl() const { return options_.max_ttl; }
  const std::string& instance() const { return options_.instance; }

  // Unlists the tensors whose idle deadline is at or before `now`; returns
  // how many. The expiry thread calls it; tests can call it directly.
  int64_t ExpireDue(absl::Time now);

 private:
  // A use renews a tensor's lifetime without a lock (the tensor records
  // when it was last used). The listed tensors are spread over shards by
  // their id's first hex digit (random), each with its own lock, so that
  // calls on resident tensors on many threads rarely meet: a call takes one
  // shard's lock shared to find each operand, and one exclusively to list
  // its output. Each listed tensor has one entry in its shard's
  // `deadlines`, at or before its real expiry; the expiry thread
  // reschedules one used since.
  struct Entry {
    std::shared_ptr<Tensor> tensor;
    absl::Duration ttl;
    absl::Time scheduled;  // its key in the shard's deadlines
    absl::Time expires() const { return tensor->last_used() + ttl; }
  };
  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<std::string, Entry> listed ABSL_GUARDED_BY(mu);
    std::set<std::pair<absl::Time, std::string>> deadlines ABSL_GUARDED_BY(mu);
  };
  static constexpr int kShards = 16;
  Shard& ShardOf(absl::string_view id) const;
  std::string NewId() const;
  void ExpiryLoop();
  // Moves the shard's due entries' tensors out of its map (freed by the
  // caller, outside the lock: freeing device memory waits on a stream);
  // returns the shard's next deadline.
  absl::Time TakeDue(Shard& shard, absl::Time now, std::vector<std::shared_ptr<Tensor>>& due)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // Lowers the expiry thread's next wake-up to `deadline`, waking it.
  void WakeBy(absl::Time deadline);
  TensorInfo InfoLocked(const Shard& shard, const Tensor& tensor) const
      ABSL_SHARED_LOCKS_REQUIRED(shard.mu);

  const TensorStoreOptions options_;
  const std::shared_ptr<TensorLedger> ledger_;
  mutable std::array<Shard, kShards> shards_;
  std::atomic<int64_t> created_{0};
  std::atomic<int64_t> expired_{0};
  // The expiry thread's: the earliest deadline it knows of (nanoseconds
  // since the Unix epoch, so that Add can read it without the lock).
  absl::Mutex expiry_mu_;
  absl::CondVar wake_;
  std::atomic<int64_t> next_due_ns_{std::numeric_limits<int64_t>::max()};
  bool stopping_ ABSL_GUARDED_BY(expiry_mu_) = false;
  std::thread expiry_;
};

}  // namespace gpucompute::server
