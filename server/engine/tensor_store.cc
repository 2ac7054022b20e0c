#include "server/engine/tensor_store.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gpucompute/common/thread_name.h"

namespace gpucompute::server {
namespace {

// 128 random bits, as 32 hex digits: an id is a capability, so it must not
// be guessable from others (getrandom reads the kernel's CSPRNG).
constexpr size_t kIdRandomBytes = 16;
// Each thread reads the kernel's random bytes this many at a time and hands
// each out once: a kept output costs no system call of its own (one per 256
// ids), and the bytes are the kernel's as before.
constexpr size_t kRandomBufferBytes = 4096;

void FillFromKernel(char* out, size_t size) {
  size_t filled = 0;
  while (filled < size) {
    const ssize_t n = getrandom(out + filled, size - filled, 0);
    if (n > 0) {
      filled += size_t(n);
    } else if (n < 0 && errno != EINTR) {
      // Without the kernel's generator no id would be safe to hand out.
      std::fprintf(stderr, "getrandom failed: %s\n", std::strerror(errno));
      std::abort();
    }
  }
}

std::string RandomHex() {
  struct Buffer {
    char bytes[kRandomBufferBytes];
    size_t used = kRandomBufferBytes;  // empty: filled at the first id
  };
  thread_local Buffer buffer;
  if (buffer.used + kIdRandomBytes > kRandomBufferBytes) {
    FillFromKernel(buffer.bytes, kRandomBufferBytes);
    buffer.used = 0;
  }
  char* const bytes = buffer.bytes + buffer.used;
  buffer.used += kIdRandomBytes;
  std::string hex = absl::BytesToHexString(absl::string_view(bytes, kIdRandomBytes));
  std::memset(bytes, 0, kIdRandomBytes);  // handed out once: not left behind in memory
  return hex;
}

bool IsOurHex(absl::string_view s) {
  if (s.size() != 2 * kIdRandomBytes) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(c) || absl::ascii_isupper(c)) return false;
  }
  return true;
}

}  // namespace

// Bytes charged by tensors that are alive, in total and per device. The
// counts are atomics: each kept output charges and refunds them, on many
// threads at once.
class TensorLedger {
 public:
  explicit TensorLedger(int64_t limit) : limit_(limit) {}

  absl::Status Charge(const Device* device, int64_t bytes) {
    int64_t held = held_.load(std::memory_order_relaxed);
    do {
      if (bytes > limit_ - held) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "tensors would exceed the tensor budget: held ", held, " bytes, asked ", bytes,
            " bytes, limit ", limit_,
            " bytes (--tensor_memory_bytes); release tensors (ReleaseTensors) or let them "
            "expire"));
      }
    } while (!held_.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed));
    On(device).fetch_add(bytes, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  void Refund(const Device* device, int64_t bytes) {
    held_.fetch_sub(bytes, std::memory_order_relaxed);
    On(device).fetch_sub(bytes, std::memory_order_relaxed);
  }
  int64_t held() const { return held_.load(std::memory_order_relaxed); }
  int64_t held_on(const Device* device) const {
    absl::ReaderMutexLock lock(&mu_);
    auto it = per_device_.find(device);
    return it == per_device_.end() ? 0 : it->second->load(std::memory_order_relaxed);
  }

 private:
  // The device's count, made on its first charge.
  std::atomic<int64_t>& On(const Device* device) {
    {
      absl::ReaderMutexLock lock(&mu_);
      auto it = per_device_.find(device);
      if (it != per_device_.end()) return *it->second;
    }
    absl::MutexLock lock(&mu_);
    auto& count = per_device_[device];
    if (count == nullptr) count = std::make_unique<std::atomic<int64_t>>(0);
    return *count;
  }

  const int64_t limit_;
  std::atomic<int64_t> held_{0};
  mutable absl::Mutex mu_;  // guards the map's shape; the counts are atomic
  absl::flat_hash_map<const Device*, std::unique_ptr<std::atomic<int64_t>>> per_device_
      ABSL_GUARDED_BY(mu_);
};

Tensor::~Tensor() {
  memory_.reset();  // the device memory goes back first, then the budget's bytes
  ledger_->Refund(&device_, bytes());
}

TensorStore::TensorStore(TensorStoreOptions options)
    : options_(std::move(options)),
      ledger_(std::make_shared<TensorLedger>(options_.limit_bytes)),
      expiry_([this] { ExpiryLoop(); }) {}

TensorStore::~TensorStore() {
  {
    absl::MutexLock lock(&expiry_mu_);
    stopping_ = true;
    wake_.Signal();
  }
  expiry_.join();
  for (Shard& shard : shards_) {
    absl::flat_hash_map<std::string, Entry> listed;
    absl::MutexLock lock(&shard.mu);
    listed.swap(shard.listed);
    shard.deadlines.clear();
  }
}

TensorStore::Shard& TensorStore::ShardOf(absl::string_view id) const {
  // An id's first hex digit is random; a string that is no id of ours
  // (looked up only to be refused or skipped) goes to shard 0.
  const char c = id.empty() ? '0' : id.front();
  const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : 0;
  return shards_[size_t(digit % kShards)];
}

std::string TensorStore::NewId() const { return absl::StrCat(RandomHex(), "@", options_.instance); }

absl::StatusOr<std::shared_ptr<Tensor>> TensorStore::Create(Device& device,
                                                            const TensorShape& shape,
                                                            absl::Time deadline) {
  const int64_t bytes = shape.bytes();
  if (auto s = ledger_->Charge(&device, bytes); !s.ok()) return s;
  auto memory = device.AllocateResident(bytes, deadline);
  if (!memory.ok()) {
    ledger_->Refund(&device, bytes);
    return memory.status();
  }
  return std::shared_ptr<Tensor>(new Tensor(NewId(), shape, device, std::move(*memory), ledger_));
}

TensorInfo TensorStore::Add(std::shared_ptr<Tensor> tensor, absl::Duration ttl) {
  if (ttl <= absl::ZeroDuration()) ttl = options_.default_ttl;
  const absl::Time now = absl::Now();
  tensor->MarkUsed(now);
  const absl::Time expires = now + ttl;
  Shard& shard = ShardOf(tensor->id());
  TensorInfo info;
  {
    absl::MutexLock lock(&shard.mu);
    const std::string& id = tensor->id();  // the tensor outlives the move of its pointer
    shard.deadlines.emplace(expires, id);
    auto [it, inserted] = shard.listed.emplace(id, Entry{std::move(tensor), ttl, expires});
    (void)inserted;  // 128 random bits: ids do not collide
    info = InfoLocked(shard, *it->second.tensor);
  }
  created_.fetch_add(1, std::memory_order_relaxed);
  // After the entry is in its shard: an expiry pass that missed it reads
  // the lowered wake-up (see ExpiryLoop).
  if (absl::ToUnixNanos(expires) < next_due_ns_.load()) WakeBy(expires);
  return info;
}

void TensorStore::WakeBy(absl::Time deadline) {
  const int64_t ns = absl::ToUnixNanos(deadline);
  absl::MutexLock lock(&expiry_mu_);
  if (ns < next_due_ns_.load()) {
    next_due_ns_.store(ns);
    wake_.Signal();
  }
}

absl::StatusOr<std::shared_ptr<Tensor>> TensorStore::Use(const std::string& id,
                                                         const std::string& field) {
  const size_t at = id.find('@');
  const absl::string_view holder =
      at == std::string::npos ? absl::string_view() : absl::string_view(id).substr(at + 1);
  if (at == std::string::npos || !IsOurHex(absl::string_view(id).substr(0, at))) {
    return absl::NotFoundError(
        absl::StrCat(field, ": \"", id,
                     "\" is not a tensor id (ids look like <32 hex "
                     "digits>@<instance>, as Upload or keep returned them)"));
  }
  if (holder != options_.instance) {
    return absl::NotFoundError(absl::StrCat(field, ": tensor ", id, " is held by instance \"",
                                            holder, "\", not by this one (\"", options_.instance,
                                            "\"): send the call to ", holder));
  }
  const Shard& shard = ShardOf(id);
  absl::ReaderMutexLock lock(&shard.mu);
  auto it = shard.listed.find(id);
  if (it == shard.listed.end()) {
    return absl::NotFoundError(absl::StrCat(
        field, ": tensor ", id, " is not held here: unknown, released, or expired after ",
        "its idle lifetime"));
  }
  Touch(*it->second.tensor);
  return it->second.tensor;
}

TensorStore::Released TensorStore::Release(const std::vector<std::string>& ids) {
  Released released;
  std::vector<std::shared_ptr<Tensor>> dropped;
  for (const std::string& id : ids) {
    Shard& shard = ShardOf(id);
    absl::MutexLock lock(&shard.mu);
    auto it = shard.listed.find(id);
    if (it == shard.listed.end()) continue;
    ++released.count;
    released.bytes += it->second.tensor->bytes();
    shard.deadlines.erase({it->second.scheduled, id});
    dropped.push_back(std::move(it->second.tensor));
    shard.listed.erase(it);
  }
  return released;  // `dropped` frees what no op still uses, outside the locks
}

TensorInfo TensorStore::InfoLocked(const Shard& shard, const Tensor& tensor) const {
  TensorInfo info;
  info.id = tensor.id();
  info.shape = tensor.shape();
  info.bytes = tensor.bytes();
  info.device = tensor.device().description().name;
  info.server = options_.instance;
  auto it = shard.listed.find(tensor.id());
  if (it != shard.listed.end() && it->second.tensor.get() == &tensor)
    info.expires = it->second.expires();
  return info;
}

TensorInfo TensorStore::InfoOf(const Tensor& tensor) const {
  const Shard& shard = ShardOf(tensor.id());
  absl::ReaderMutexLock lock(&shard.mu);
  return InfoLocked(shard, tensor);
}

std::vector<TensorInfo> TensorStore::List() const {
  std::vector<TensorInfo> infos;
  for (const Shard& shard : shards_) {
    absl::ReaderMutexLock lock(&shard.mu);
    for (const auto& [id, e] : shard.listed) infos.push_back(InfoLocked(shard, *e.tensor));
  }
  std::sort(infos.begin(), infos.end(),
            [](const TensorInfo& x, const TensorInfo& y) { return x.id < y.id; });
  return infos;
}

Device* TensorStore::PlaceNew(const std::vector<std::unique_ptr<Device>>& devices) const {
  Device* best = nullptr;
  int64_t best_held = 0;
  for (const auto& d : devices) {
    if (!d->healthy()) continue;
    const int64_t held = ledger_->held_on(d.get());
    if (best == nullptr || held < best_held) {
      best = d.get();
      best_held = held;
    }
  }
  return best;
}

TensorCounters TensorStore::counters() const {
  TensorCounters c;
  c.held_bytes = ledger_->held();
  c.limit_bytes = options_.limit_bytes;
  for (const Shard& shard : shards_) {
    absl::ReaderMutexLock lock(&shard.mu);
    c.tensors += int64_t(shard.listed.size());
  }
  c.created = created_.load(std::memory_order_relaxed);
  c.expired = expired_.load(std::memory_order_relaxed);
  return c;
}

absl::Time TensorStore::TakeDue(Shard& shard, absl::Time now,
                                std::vector<std::shared_ptr<Tensor>>& due) {
  while (!shard.deadlines.empty() && shard.deadlines.begin()->first <= now) {
    auto it = shard.listed.find(shard.deadlines.begin()->second);
    shard.deadlines.erase(shard.deadlines.begin());
    if (it == shard.listed.end()) continue;
    Entry& e = it->second;
    if (const absl::Time expires = e.expires(); expires > now) {
      // Used since it was scheduled: due later.
      e.scheduled = expires;
      shard.deadlines.emplace(expires, it->first);
      continue;
    }
    due.push_back(std::move(e.tensor));
    shard.listed.erase(it);
    expired_.fetch_add(1, std::memory_order_relaxed);
  }
  return shard.deadlines.empty() ? absl::InfiniteFuture() : shard.deadlines.begin()->first;
}

int64_t TensorStore::ExpireDue(absl::Time now) {
  std::vector<std::shared_ptr<Tensor>> due;
  for (Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    TakeDue(shard, now, due);
  }
  return int64_t(due.size());  // freed here, outside the locks
}

void TensorStore::ExpiryLoop() {
  common::NameThisThread("tensor-expiry");
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  absl::MutexLock lock(&expiry_mu_);
  while (!stopping_) {
    const int64_t next_ns = next_due_ns_.load();
    const absl::Time next =
        next_ns == kNever ? absl::InfiniteFuture() : absl::FromUnixNanos(next_ns);
    if (next > absl::Now()) {
      // Woken early by a new, earlier deadline or by the destructor.
      wake_.WaitWithDeadline(&expiry_mu_, next);
      continue;
    }
    // A pass over every shard. The wake-up is cleared first: a tensor
    // listed in a shard after the pass read it lowers it again (Add).
    next_due_ns_.store(kNever);
    expiry_mu_.Unlock();
    const absl::Time now = absl::Now();
    std::vector<std::shared_ptr<Tensor>> due;
    absl::Time earliest = absl::InfiniteFuture();
    for (Shard& shard : shards_) {
      absl::MutexLock shard_lock(&shard.mu);
      earliest = std::min(earliest, TakeDue(shard, now, due));
    }
    due.clear();  // freed outside every lock
    expiry_mu_.Lock();
    if (earliest != absl::InfiniteFuture() && absl::ToUnixNanos(earliest) < next_due_ns_.load()) {
      next_due_ns_.store(absl::ToUnixNanos(earliest));
    }
  }
}

}  // namespace gpucompute::server
