#include "server/engine/tensor_store.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace gpucompute::server {
namespace {

// 128 random bits, as 32 hex digits: an id is a capability, so it must not
// be guessable from others (getrandom reads the kernel's CSPRNG).
constexpr size_t kIdRandomBytes = 16;

std::string RandomHex() {
  char bytes[kIdRandomBytes];
  size_t filled = 0;
  while (filled < sizeof bytes) {
    const ssize_t n = getrandom(bytes + filled, sizeof bytes - filled, 0);
    if (n > 0) {
      filled += size_t(n);
    } else if (n < 0 && errno != EINTR) {
      // Without the kernel's generator no id would be safe to hand out.
      std::fprintf(stderr, "getrandom failed: %s\n", std::strerror(errno));
      std::abort();
    }
  }
  return absl::BytesToHexString(absl::string_view(bytes, sizeof bytes));
}

bool IsOurHex(absl::string_view s) {
  if (s.size() != 2 * kIdRandomBytes) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(c) || absl::ascii_isupper(c)) return false;
  }
  return true;
}

}  // namespace

// Bytes charged by tensors that are alive, in total and per device.
class TensorLedger {
 public:
  explicit TensorLedger(int64_t limit) : limit_(limit) {}

  absl::Status Charge(const Device* device, int64_t bytes) {
    absl::MutexLock lock(&mu_);
    if (bytes > limit_ - held_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "tensors would exceed the tensor budget: held ", held_, " bytes, asked ", bytes,
          " bytes, limit ", limit_,
          " bytes (--tensor_memory_bytes); release tensors (ReleaseTensors) or let them expire"));
    }
    held_ += bytes;
    per_device_[device] += bytes;
    return absl::OkStatus();
  }
  void Refund(const Device* device, int64_t bytes) {
    absl::MutexLock lock(&mu_);
    held_ -= bytes;
    per_device_[device] -= bytes;
  }
  int64_t held() const {
    absl::MutexLock lock(&mu_);
    return held_;
  }
  int64_t held_on(const Device* device) const {
    absl::MutexLock lock(&mu_);
    auto it = per_device_.find(device);
    return it == per_device_.end() ? 0 : it->second;
  }

 private:
  const int64_t limit_;
  mutable absl::Mutex mu_;
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<const Device*, int64_t> per_device_ ABSL_GUARDED_BY(mu_);
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
  std::map<std::string, Entry> listed;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    wake_.Signal();
    listed.swap(listed_);
    deadlines_.clear();
  }
  expiry_.join();
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
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  tensor->MarkUsed(now);
  const absl::Time expires = now + ttl;
  const std::string id = tensor->id();
  if (deadlines_.empty() || expires < deadlines_.begin()->first) wake_.Signal();
  deadlines_.emplace(expires, id);
  auto [it, inserted] = listed_.emplace(id, Entry{std::move(tensor), ttl, expires});
  (void)inserted;  // 128 random bits: ids do not collide
  ++created_;
  return InfoLocked(*it->second.tensor);
}

absl::StatusOr<std::shared_ptr<Tensor>> TensorStore::Use(const std::string& id,
                                                         const std::string& field) {
  const size_t at = id.find('@');
  const std::string holder = at == std::string::npos ? "" : id.substr(at + 1);
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
  absl::ReaderMutexLock lock(&mu_);
  auto it = listed_.find(id);
  if (it == listed_.end()) {
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
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& id : ids) {
      auto it = listed_.find(id);
      if (it == listed_.end()) continue;
      ++released.count;
      released.bytes += it->second.tensor->bytes();
      deadlines_.erase({it->second.scheduled, id});
      dropped.push_back(std::move(it->second.tensor));
      listed_.erase(it);
    }
  }
  return released;  // `dropped` frees what no op still uses, outside the lock
}

TensorInfo TensorStore::InfoLocked(const Tensor& tensor) const {
  TensorInfo info;
  info.id = tensor.id();
  info.shape = tensor.shape();
  info.bytes = tensor.bytes();
  info.device = tensor.device().description().name;
  info.server = options_.instance;
  auto it = listed_.find(tensor.id());
  if (it != listed_.end() && it->second.tensor.get() == &tensor)
    info.expires = it->second.expires();
  return info;
}

TensorInfo TensorStore::InfoOf(const Tensor& tensor) const {
  absl::ReaderMutexLock lock(&mu_);
  return InfoLocked(tensor);
}

std::vector<TensorInfo> TensorStore::List() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<TensorInfo> infos;
  infos.reserve(listed_.size());
  for (const auto& [id, e] : listed_) infos.push_back(InfoLocked(*e.tensor));
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
  absl::MutexLock lock(&mu_);
  c.tensors = int64_t(listed_.size());
  c.created = created_;
  c.expired = expired_;
  return c;
}

std::vector<std::shared_ptr<Tensor>> TensorStore::TakeDueLocked(absl::Time now) {
  std::vector<std::shared_ptr<Tensor>> due;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    auto it = listed_.find(deadlines_.begin()->second);
    deadlines_.erase(deadlines_.begin());
    if (it == listed_.end()) continue;
    Entry& e = it->second;
    if (const absl::Time expires = e.expires(); expires > now) {
      // Used since it was scheduled: due later.
      e.scheduled = expires;
      deadlines_.emplace(expires, it->first);
      continue;
    }
    due.push_back(std::move(e.tensor));
    listed_.erase(it);
    ++expired_;
  }
  return due;
}

int64_t TensorStore::ExpireDue(absl::Time now) {
  std::vector<std::shared_ptr<Tensor>> due;
  {
    absl::MutexLock lock(&mu_);
    due = TakeDueLocked(now);
  }
  return int64_t(due.size());  // freed here, outside the lock
}

void TensorStore::ExpiryLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time next = deadlines_.empty() ? absl::InfiniteFuture() : deadlines_.begin()->first;
    if (next > absl::Now()) {
      // Woken early by a new, earlier deadline or by the destructor.
      wake_.WaitWithDeadline(&mu_, next);
      continue;
    }
    std::vector<std::shared_ptr<Tensor>> due = TakeDueLocked(absl::Now());
    mu_.Unlock();
    due.clear();
    mu_.Lock();
  }
}

}  // namespace gpucompute::server
