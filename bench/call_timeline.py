#!/usr/bin/env python3
"""Where one call's time goes between a client and a server, from a system-wide
`perf script` of socket and scheduler events (see call_timeline.sh).

For each call of the client's busiest sending thread (one call in flight):
  request -> server read: client sendmsg to the server's first recvmsg after it
  server: that recvmsg to the server's last sendmsg before the client's read
  answer -> client read: that sendmsg to the client's last recvmsg before
    its next sendmsg (the answer)
  client turnaround: that recvmsg to the client's next sendmsg
Prints the median and spread of each span over the calls.

  call_timeline.py PERF_SCRIPT_TXT CLIENT_PID SERVER_PID
"""
import re
import statistics
import sys
from collections import Counter

LINE = re.compile(r"\s*(.*?)\s+(\d+)/(\d+)\s+\[\d+\]\s+([\d.]+):\s+(\S+):\s*(.*)")


def main():
    path, client, server = sys.argv[1], sys.argv[2], sys.argv[3]
    events = []  # (microseconds, pid, tid, kind)
    for line in open(path, errors="replace"):
        m = LINE.match(line)
        if not m:
            continue
        _, pid, tid, t, name, rest = m.groups()
        if pid not in (client, server):
            continue
        if name == "syscalls:sys_enter_sendmsg":
            kind = "send"
        elif name == "syscalls:sys_exit_recvmsg":
            # A failed read (EAGAIN of a polling client) moves no bytes.
            if rest.strip().startswith("0xffff"):
                continue
            kind = "recv"
        else:
            continue
        events.append((float(t) * 1e6, pid, tid, kind))
    events.sort()
    senders = Counter(e[2] for e in events if e[1] == client and e[3] == "send")
    if not senders:
        sys.exit("no sendmsg of the client in the timeline")
    caller = senders.most_common(1)[0][0]
    mine = [e for e in events if e[1] == client and e[2] == caller]
    spans = {
        "request -> server read": [],
        "server": [],
        "answer -> client read": [],
        "client turnaround": [],
        "call, send to send": [],
    }
    for i, (t_send, _, _, kind) in enumerate(mine):
        if kind != "send":
            continue
        # The answer is the last read before the next send: frames read
        # earlier (a ping, a window update) are not it.
        t_next = next((e[0] for e in mine[i + 1 :] if e[3] == "send"), None)
        if t_next is None:
            continue
        reads_between = [e[0] for e in mine[i + 1 :] if e[3] == "recv" and e[0] < t_next]
        if not reads_between:
            continue
        t_read = reads_between[-1]
        on_server = [e for e in events if e[1] == server and t_send <= e[0] <= t_read]
        reads = [e[0] for e in on_server if e[3] == "recv"]
        sends = [e[0] for e in on_server if e[3] == "send"]
        if not reads or not sends or sends[-1] < reads[0]:
            continue
        spans["request -> server read"].append(reads[0] - t_send)
        spans["server"].append(sends[-1] - reads[0])
        spans["answer -> client read"].append(t_read - sends[-1])
        spans["client turnaround"].append(t_next - t_read)
        spans["call, send to send"].append(t_next - t_send)
    for name, values in spans.items():
        if not values:
            print(f"{name:26s} no calls matched")
            continue
        values.sort()
        n = len(values)
        print(
            f"{name:26s} median {statistics.median(values):8.1f} us   "
            f"p10 {values[n // 10]:8.1f}   p90 {values[9 * n // 10]:8.1f}   ({n} calls)"
        )


if __name__ == "__main__":
    main()
