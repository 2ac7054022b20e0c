// Stopping on SIGINT or SIGTERM: the signals taken synchronously by the main
// thread, and the drain that lets the calls in flight finish, their answers
// reaching their clients, before the server stops.
#pragma once

#include <grpcpp/grpcpp.h>

#include <csignal>
#include <vector>

#include "absl/time/time.h"
#include "server/engine/scheduler.h"
#include "server/grpc/compute_service.h"
#include "server/listeners.h"
#include "server/ops/metrics.h"

namespace gpucompute::server {

// Blocks SIGINT and SIGTERM in the calling thread, so that threads started
// after it do not receive them, and ignores SIGPIPE; the set to wait on.
sigset_t BlockStopSignals();

// True when SIGINT or SIGTERM arrived while the server was starting.
bool StopSignalPending();

// Everything a stop takes down, in the order it goes.
struct RunningServer {
  grpc::Server& server;
  ComputeService& service;
  Scheduler& scheduler;
  Metrics& metrics;
  const std::vector<Listener>& listeners;
};

// Waits for one of `signals`, then drains for at most `grace` and stops
// `running`, logging what became of the calls in flight. Returns the exit
// status (0: none was cut off and every answer left; else 1), and makes
// sure the process exits with it shortly even if gRPC's teardown lingers.
int WaitForStopAndDrain(const sigset_t& signals, absl::Duration grace,
                        const RunningServer& running);

}  // namespace gpucompute::server
