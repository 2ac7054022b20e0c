// Work run on a few threads of the queue's own, in the order posted, for
// callers whose threads must not wait (copies to and from the devices, the
// parts of a large host copy).
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gpucompute::common {

class WorkQueue {
 public:
  // `threads` workers, each named `name` and its number (see thread_name.h);
  // with none, nothing posted runs.
  WorkQueue(int threads, std::string name);
  // Runs everything queued, work it posts included, then joins the workers.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Post(std::function<void()> work);
  int threads() const { return int(threads_.size()); }

 private:
  void Loop(const std::string& name);

  absl::Mutex mu_;
  std::deque<std::function<void()>> work_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace gpucompute::common
