// Stopping on a signal (shutdown.h).
#include "server/shutdown.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/grpc/transport.h"
#include "server/ops/log.h"

namespace gpucompute::server {

sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  return signals;
}

bool StopSignalPending() {
  sigset_t pending;
  sigpending(&pending);
  return sigismember(&pending, SIGINT) || sigismember(&pending, SIGTERM);
}

int WaitForStopAndDrain(const sigset_t& signals, absl::Duration grace,
                        const RunningServer& running) {
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  LogInfo(absl::StrCat("received ", strsignal(signal_number), ": draining"));
  running.server.GetHealthCheckService()->SetServingStatus(false);
  const absl::Time grace_end = absl::Now() + grace;
  // gRPC's own drain (Server::Shutdown) closes each connection as soon as
  // its last call's answer is in the socket, and a client still reading it
  // then loses the rest to a reset (see WaitForSocketsToDrain): 1 of 16
  // 32 MiB answers in flight at SIGTERM, in about one run of two. So the
  // service drains first, connections open: it refuses new calls, every
  // call in flight ends (its reactor's OnDone: answered, or cancelled by its
  // client), and their answers leave the sockets; only then does gRPC close
  // the connections, all idle by then.
  running.service.StopAdmitting();
  const int64_t admitted = running.service.calls_in_flight();
  const int64_t started_before = running.service.calls_started();
  const int64_t answered_before = running.service.calls_answered();
  const int64_t cancelled_before = running.service.calls_cancelled();
  while (running.service.calls_in_flight() > 0 && absl::Now() < grace_end) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const int64_t cut_off = running.service.calls_in_flight();
  const int64_t unsent_bytes = WaitForSocketsToDrain(grace_end);
  // Stops accepting, cancels what is left (calls still running when the
  // grace ran out) and closes the connections at once: they are idle, and
  // gRPC's graceful close of an idle connection whose client keeps its
  // channel open took 20 s more (measured).
  running.server.Shutdown(absl::ToChronoTime(absl::Now()));
  running.scheduler.Shutdown();
  running.server.Wait();
  RemoveSocketFiles(running.listeners);
  running.metrics.AttachScheduler(nullptr);  // the scheduler goes before the endpoint
  running.metrics.AttachTensorStore(nullptr);
  running.metrics.AttachSharedMemory(nullptr);
  running.metrics.AttachGpuTelemetry(nullptr);  // stops the sampler
  // Calls that arrived while draining were refused (answered UNAVAILABLE).
  const int64_t refused = running.service.calls_started() - started_before;
  const int64_t answered =
      std::max<int64_t>(0, running.service.calls_answered() - answered_before - refused);
  const int64_t cancelled = running.service.calls_cancelled() - cancelled_before;
  const bool clean = cut_off == 0 && unsent_bytes == 0;
  std::string summary = absl::StrCat("stopped: of ", admitted, " call(s) in flight at the signal, ",
                                     answered, " answered, ", cancelled,
                                     " cancelled (by their clients, or at the grace: ", cut_off,
                                     "); ", refused, " new call(s) refused while draining; ");
  absl::StrAppend(&summary, unsent_bytes == 0
                                ? std::string("every answer left for its client")
                                : absl::StrCat(unsent_bytes,
                                               " bytes of answers not yet taken by their clients "
                                               "when the grace ran out"));
  (clean ? LogInfo : LogError)(summary);
  // Every call is done. gRPC's own teardown (grpc_shutdown, run as the last
  // gRPC object goes) can then wait up to ~10 s on an internal timer; the
  // exit does not wait for it.
  const int exit_code = clean ? 0 : 1;
  std::thread([exit_code] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::fflush(nullptr);
    std::_Exit(exit_code);
  }).detach();
  return exit_code;
}

}  // namespace gpucompute::server
