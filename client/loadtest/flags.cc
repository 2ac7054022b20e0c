// gpucompute-loadtest's command-line flags: names, defaults and help texts
// (flags.h declares them).
#include "loadtest/flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, server, "localhost:50051",
          "server address: host:port, unix:/path/to/socket, or any gRPC target (e.g. "
          "dns:///name:port)");
ABSL_FLAG(std::string, op, "matmul",
          "matmul, transpose or reduce; or upload / download: Upload and Download streams of "
          "an MxN --shape (default 4096x4096), one tensor per request, rows in bytes per second "
          "beside the TCP echo (--baseline defaults to tcp)");
ABSL_FLAG(std::string, placement, "inline",
          "where the matrices are, comma-separated: inline (sent and returned in every "
          "request), tensor (operands uploaded once and named by id, outputs kept on the "
          "server and released: no matrix bytes move), shm (operands and output in a "
          "shared-memory region registered with a server on this host that runs with "
          "--allow_shared_memory: no matrix bytes on the socket), or several, e.g. "
          "inline,tensor,shm to compare them");
ABSL_FLAG(std::string, shape, "1024x1024x1024",
          "matmul: MxKxN, a is M x K times b K x N (result M x N), as the gpucompute CLI "
          "takes it; transpose/reduce: MxN");
ABSL_FLAG(std::string, dtype, "float32", "float32, float64, float16 or bfloat16");
ABSL_FLAG(std::string, axis, "all", "reduce: all, per_row or per_column");
ABSL_FLAG(std::string, reduce_op, "sum", "reduce: sum, min, max or mean");
ABSL_FLAG(std::string, variants, "auto",
          "comma-separated variant names (auto: the server chooses), or all: auto and every "
          "variant of the op that GetServerInfo lists for the dtype");
ABSL_FLAG(bool, allow_tf32, false, "let auto pick reduced-precision variants");
ABSL_FLAG(std::string, concurrency, "",
          "closed loop: comma-separated requests in flight, e.g. 1,4,16,64 (default 1,4,16 "
          "unless --rate is given)");
ABSL_FLAG(std::string, rate, "",
          "open loop: comma-separated Poisson arrival rates in requests/s, e.g. 100,500");
ABSL_FLAG(int32_t, max_outstanding, 1024,
          "open loop: requests in flight at most; arrivals beyond are counted as dropped "
          "(1 to 1000000)");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(1),
          "warm-up per row, not measured (0 or more, less than --max_time)");
ABSL_FLAG(absl::Duration, window, absl::Seconds(1),
          "length of one measurement window (above 0, at most --max_time)");
ABSL_FLAG(int32_t, min_requests, 20,
          "a window lasts until it has at least this many completions (1 or more)");
ABSL_FLAG(int32_t, stable_windows, 3,
          "consecutive windows whose throughput and p95 must agree; the row reports them merged "
          "(1 to 1000000)");
ABSL_FLAG(double, stability, 0.10,
          "agreement: each within this fraction of their mean (above 0, at most 1)");
ABSL_FLAG(absl::Duration, max_time, absl::Seconds(30),
          "time limit per row, warm-up included; an unstable row is reported as such (above 0, "
          "at most 24h)");
ABSL_FLAG(absl::Duration, deadline, absl::Seconds(60),
          "deadline of each request (above 0, at most 24h)");
ABSL_FLAG(std::string, baseline, "",
          "reference rows run before the variants, at each concurrency (comma-separated): "
          "tcp echoes the same payload over a loopback TCP socket, the transport ceiling "
          "(meaningful when the server runs on this host; against a unix: target the echo "
          "runs over a unix socket instead, row unix_echo, so that both cross the same kind "
          "of socket); grpc sends the standard health "
          "Check to the server over the same channel, the round trip of a gRPC call that "
          "does no work; service sends ListTensors (row list_tensors), a call of the Compute "
          "service itself that touches no device: what the service's own handling adds to "
          "the health Check; echo (row grpc_echo, compute ops) sends the first variant's "
          "inline request to a gRPC server that this process starts on loopback (a unix "
          "socket against a unix: target), plaintext, which answers every call with a copy "
          "of the op's response as the server encoded it: gRPC carrying the op's bytes both "
          "ways with no work behind it, over the same --connections; xEcho gives an inline "
          "row's req/s over it at the same concurrency and connections");
ABSL_FLAG(std::string, echo_at, "loadtest",
          "where --baseline=echo's gRPC server runs: loadtest (in this process, as described "
          "under --baseline) or server (the target's own Echo rpc, which skips the request's "
          "payload where it lies and answers with as many zero bytes as the op's response: "
          "the same bytes through the same server's gRPC threads and admission, over "
          "connections of their own as for the in-process echo)");
ABSL_FLAG(int32_t, echo_grpc_queues, 0,
          "--baseline=echo serves its calls as a server started with --grpc_queues=N serves "
          "the compute calls: on N completion queues, a thread each (give the server's value); "
          "0: on gRPC's callback threads, as a server with --grpc_queues=0");
ABSL_FLAG(std::string, label, "",
          "free text added to every row, e.g. delay=100us: in its name in the table and the "
          "HTML (\"auto delay=100us\"), and as label in the CSV and JSON; names the server's "
          "configuration when runs are merged with --merge_json");
ABSL_FLAG(std::string, merge_json, "",
          "comma-separated --json files of earlier runs of one workload (e.g. against "
          "differently configured servers): instead of running, render their rows together "
          "into the table and --csv, --json and --html; with several files, rows without a "
          "--label take their file's name");
ABSL_FLAG(std::string, csv, "", "write the rows as CSV to this file");
ABSL_FLAG(std::string, json, "", "write the run and its rows as JSON to this file");
ABSL_FLAG(std::string, html, "",
          "write a self-contained HTML report (latency-vs-throughput curves per variant)");
ABSL_FLAG(std::string, progress, "auto",
          "progress bar on stderr: auto (when a terminal), always, never");
ABSL_FLAG(uint64_t, seed, 1, "seed of the random input matrices and open-loop arrivals");
ABSL_FLAG(std::string, tls_ca, "", "PEM root CA; turns TLS on");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate for mutual TLS (with --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_server_name, "",
          "name to check in the server certificate; turns TLS on");
ABSL_FLAG(bool, tls, false, "use TLS with the system's root CAs");
ABSL_FLAG(std::string, token_file, "",
          "send the file's content as 'authorization: Bearer <token>'");
ABSL_FLAG(bool, grpc_defaults, false,
          "use gRPC's stock frame, window and read sizes instead of those for large messages "
          "(to measure what the tuning buys)");
ABSL_FLAG(bool, busy_poll, false,
          "closed loop (--concurrency): each load thread polls its completion queue without "
          "sleeping while its calls are in flight (one busy core per thread), so the latency "
          "rows leave out the client's own wake-up; compare rows with and without");
ABSL_FLAG(int32_t, load_threads, 0,
          "closed loop (--concurrency): threads that issue the calls, each with its own "
          "completion queue on one channel (thread t on channel t mod --connections), the calls "
          "in flight shared among them (fewer threads than channels leave channels idle); 0: one "
          "per core, and at least one per channel. E.g. as many as --connections, so that no two "
          "threads share a connection (0 to 4096)");
ABSL_FLAG(std::string, lb, "",
          "round_robin: spread requests over every address a dns:/// target resolves to");
ABSL_FLAG(std::string, connections, "1",
          "gRPC channels, each with its own TCP connection, that the requests are spread "
          "over (one HTTP/2 connection is read by one thread at a time on each side); "
          "comma-separated, e.g. 1,8, runs each variant's (and the grpc baseline's) sweep once "
          "per value, rows in the conn column (upload and download stream over one)");
