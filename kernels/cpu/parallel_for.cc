// The pool behind ParallelFor (parallel_for.h).
#include "cpu/parallel_for.h"

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gpucompute/common/thread_name.h"

namespace gpucompute::kernels::cpu {
namespace {

// One RunChunks call: its chunks are taken one at a time by whichever
// thread asks next. The pool's threads hold it by shared_ptr, so a thread
// that finds every chunk taken after the caller returned touches live
// memory; `run` is called only for a chunk taken, before the caller returns.
struct Job {
  Job(int64_t chunks, absl::FunctionRef<void(int64_t)> run)
      : chunks(chunks), run(run), left(chunks) {}
  const int64_t chunks;
  const absl::FunctionRef<void(int64_t)> run;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> left;  // chunks not finished
  absl::Mutex mu;
  bool finished ABSL_GUARDED_BY(mu) = false;
};

// Runs chunks of `job` until none is left to take; says the last one
// finished to a caller waiting for it.
void Work(Job& job) {
  for (int64_t c = job.next.fetch_add(1); c < job.chunks; c = job.next.fetch_add(1)) {
    job.run(c);
    if (job.left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      absl::MutexLock lock(&job.mu);
      job.finished = true;
    }
  }
}

class Pool {
 public:
  explicit Pool(int64_t threads) : helpers_(threads) {
    for (int64_t t = 0; t < threads; ++t) {
      std::thread([this, t] {
        common::NameThisThread("cpu-pool" + std::to_string(t));
        Loop();
      }).detach();
    }
  }

  void Run(int64_t chunks, absl::FunctionRef<void(int64_t)> run) {
    auto job = std::make_shared<Job>(chunks, run);
    {
      absl::MutexLock lock(&mu_);
      // A helper per chunk beyond the caller's, as many as there are.
      for (int64_t i = 1; i < chunks && i <= helpers_; ++i) queue_.push_back(job);
    }
    Work(*job);
    absl::MutexLock lock(&job->mu);
    job->mu.Await(absl::Condition(&job->finished));
  }

 private:
  void Loop() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](std::deque<std::shared_ptr<Job>>* q) { return !q->empty(); }, &queue_));
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      Work(*job);
    }
  }

  const int64_t helpers_;
  absl::Mutex mu_;
  std::deque<std::shared_ptr<Job>> queue_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

int64_t HardwareThreads() {
  static const int64_t threads = std::max(1u, std::thread::hardware_concurrency());
  return threads;
}

void RunChunks(int64_t chunks, absl::FunctionRef<void(int64_t chunk)> run) {
  if (chunks <= 1) {
    if (chunks == 1) run(0);
    return;
  }
  // Never destroyed: its threads wait for work until the process ends.
  static Pool* const pool = new Pool(HardwareThreads() - 1);
  pool->Run(chunks, run);
}

}  // namespace gpucompute::kernels::cpu
