#include "gpucompute/common/work_queue.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "gpucompute/common/thread_name.h"

namespace gpucompute::common {

WorkQueue::WorkQueue(int threads, std::string name) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this, name = absl::StrCat(name, i)] { Loop(name); });
  }
}

WorkQueue::~WorkQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (auto& t : threads_) t.join();
}

void WorkQueue::Post(std::function<void()> work) {
  absl::MutexLock lock(&mu_);
  work_.push_back(std::move(work));
}

void WorkQueue::Loop(const std::string& name) {
  NameThisThread(name);
  for (;;) {
    std::function<void()> work;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkQueue* q)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) { return q->stopping_ || !q->work_.empty(); },
          this));
      // Stopping with nothing queued: queued work is always run first.
      if (work_.empty()) return;
      work = std::move(work_.front());
      work_.pop_front();
    }
    work();
  }
}

}  // namespace gpucompute::common
