#include "loadtest/load.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "gpucompute/client.h"
#include "gpucompute/common/stats.h"
#include "gpucompute/kernels/problem.h"

namespace gpucompute::loadtest {
namespace {

// Whether every value lies within +-tolerance of their mean.
bool WithinOfMean(const std::vector<double>& values, double tolerance) {
  double mean = 0;
  for (double v : values) mean += v;
  mean /= values.size();
  if (mean <= 0) return false;
  for (double v : values) {
    if (std::abs(v - mean) > tolerance * mean) return false;
  }
  return true;
}

// The workload as kernels/ states a shape; its functions do the arithmetic.
kernels::Problem ProblemOf(const Workload& w) {
  kernels::Problem p;
  p.op = w.op == v1::OP_MATMUL      ? kernels::Op::kMatMul
         : w.op == v1::OP_TRANSPOSE ? kernels::Op::kTranspose
                                    : kernels::Op::kReduce;
  p.dtype = w.dtype;
  p.m = w.m;
  p.n = w.n;
  p.k = w.k;
  p.reduce_axis = w.axis == v1::REDUCE_AXIS_PER_ROW      ? kernels::ReduceAxis::kPerRow
                  : w.axis == v1::REDUCE_AXIS_PER_COLUMN ? kernels::ReduceAxis::kPerColumn
                                                         : kernels::ReduceAxis::kAll;
  return p;
}

}  // namespace

std::string Workload::ShapeText() const { return gpucompute::ShapeText(op, {m, n, k}); }

int64_t Workload::OutputRows() const { return kernels::OutputRows(ProblemOf(*this)); }

int64_t Workload::OutputCols() const { return kernels::OutputCols(ProblemOf(*this)); }

int64_t Workload::RequestPayloadBytes() const {
  if (transfer != Transfer::kNone) {
    return transfer == Transfer::kUpload ? m * n * DTypeSize(dtype) : 0;
  }
  const kernels::Problem p = ProblemOf(*this);
  return (kernels::InputAElements(p) + kernels::InputBElements(p)) * kernels::ElementSize(p.dtype);
}

int64_t Workload::ResponsePayloadBytes() const {
  if (transfer != Transfer::kNone) {
    return transfer == Transfer::kDownload ? m * n * DTypeSize(dtype) : 0;
  }
  const kernels::Problem p = ProblemOf(*this);
  return kernels::OutputElements(p) * kernels::ElementSize(p.dtype);
}

void WindowStats::Merge(const WindowStats& other) {
  duration += other.duration;
  latencies_ns.insert(latencies_ns.end(), other.latencies_ns.begin(), other.latencies_ns.end());
  for (const auto& [code, count] : other.errors) errors[code] += count;
  dropped += other.dropped;
  has_server_report = has_server_report || other.has_server_report;
  queue_us += other.queue_us;
  upload_us += other.upload_us;
  compute_us += other.compute_us;
  download_us += other.download_us;
  server_total_us += other.server_total_us;
  batch_sum += other.batch_sum;
  stamped += other.stamped;
  way_in_ns += other.way_in_ns;
  way_out_ns += other.way_out_ns;
}

double WindowStats::Throughput() const {
  const double seconds = std::chrono::duration<double>(duration).count();
  return seconds > 0 ? latencies_ns.size() / seconds : 0;
}

int64_t WindowStats::Percentile(double p) const {
  return common::PercentileOfSorted(latencies_ns, p);
}

Recorder::Recorder() : since_(Clock::now()) {}

void Recorder::Ok(Clock::duration latency, const v1::ExecutionReport* report,
                  int64_t answered_unix_ns) {
  const int64_t latency_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(latency).count();
  std::lock_guard<std::mutex> lock(mu_);
  current_.latencies_ns.push_back(latency_ns);
  if (report != nullptr) {
    if (report->received_unix_ns() > 0 && answered_unix_ns > 0) {
      const int64_t sent = answered_unix_ns - latency_ns;
      const int64_t left_server = report->received_unix_ns() + report->total_us() * 1000;
      ++current_.stamped;
      current_.way_in_ns += report->received_unix_ns() - sent;
      current_.way_out_ns += answered_unix_ns - left_server;
    }
    current_.has_server_report = true;
    current_.queue_us += report->queue_us();
    current_.upload_us += report->upload_us();
    current_.compute_us += report->compute_us();
    current_.download_us += report->download_us();
    current_.server_total_us += report->total_us();
    current_.batch_sum += std::max(1, report->batch_size());
  }
}

void Recorder::Error(const std::string& code) {
  std::lock_guard<std::mutex> lock(mu_);
  ++current_.errors[code];
}

void Recorder::Dropped() {
  std::lock_guard<std::mutex> lock(mu_);
  ++current_.dropped;
}

int64_t Recorder::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = static_cast<int64_t>(current_.latencies_ns.size());
  for (const auto& [code, count] : current_.errors) n += count;
  return n;
}

WindowStats Recorder::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = Clock::now();
  WindowStats out = std::move(current_);
  current_ = WindowStats();
  out.duration = now - since_;
  since_ = now;
  return out;
}

Measurement Measure(Driver& driver, const MeasureSettings& settings, const TickFn& on_tick) {
  Recorder recorder;
  const Clock::time_point begin = Clock::now();
  const Clock::time_point give_up = begin + absl::ToChronoNanoseconds(settings.max_time);
  const auto tick = std::chrono::milliseconds(100);
  auto elapsed = [&] { return absl::FromChrono(Clock::now() - begin); };

  driver.Start(&recorder);
  const Clock::time_point warm = begin + absl::ToChronoNanoseconds(settings.warmup);
  // Warm-up lasts its time and at least one completion (connections, the
  // server's first calibration of a shape).
  while ((Clock::now() < warm || recorder.count() == 0) && Clock::now() < give_up) {
    std::this_thread::sleep_for(tick);
    on_tick(elapsed(), 0, nullptr);
  }
  Measurement result;
  auto count_answers = [&result](const WindowStats& w) {
    result.answered_ok += int64_t(w.latencies_ns.size());
    for (const auto& [code, n] : w.errors) result.answered_errors[code] += n;
  };
  count_answers(recorder.Take());

  std::vector<WindowStats> windows;
  bool stable = false;
  while (!stable && Clock::now() < give_up) {
    const Clock::time_point window_end = Clock::now() + absl::ToChronoNanoseconds(settings.window);
    while ((Clock::now() < window_end || recorder.count() < settings.min_requests_per_window) &&
           Clock::now() < give_up) {
      std::this_thread::sleep_for(tick);
      on_tick(elapsed(), static_cast<int>(windows.size()),
              windows.empty() ? nullptr : &windows.back());
    }
    windows.push_back(recorder.Take());
    count_answers(windows.back());
    std::sort(windows.back().latencies_ns.begin(), windows.back().latencies_ns.end());
    const int n = settings.stable_windows;
    if (static_cast<int>(windows.size()) >= n) {
      std::vector<double> throughput, p95;
      for (auto w = windows.end() - n; w != windows.end(); ++w) {
        throughput.push_back(w->Throughput());
        p95.push_back(static_cast<double>(w->Percentile(95)));
      }
      stable =
          WithinOfMean(throughput, settings.stability) && WithinOfMean(p95, settings.stability);
    }
  }
  driver.Stop();
  count_answers(recorder.Take());  // requests that were in flight at the end

  result.windows = static_cast<int>(windows.size());
  result.stable = stable;
  const size_t keep = std::min<size_t>(windows.size(), settings.stable_windows);
  for (auto w = windows.end() - keep; w != windows.end(); ++w) result.stats.Merge(*w);
  std::sort(result.stats.latencies_ns.begin(), result.stats.latencies_ns.end());
  return result;
}

}  // namespace gpucompute::loadtest
