#!/usr/bin/env python3
"""Summarizes bench/tracker's results: per case and server, the median and range of the rate,
server CPU, rate per server-CPU-second and RSS, and hotpath's ratio to the peer in the same run.
Writes the summary as JSON beside the TSV too."""

import json
import statistics
import sys
from collections import defaultdict


def main(path):
    rows = defaultdict(list)
    for line in open(path):
        case, server, _run, value, cpu, rss = line.rstrip("\n").split("\t")
        rows[(case, server)].append((float(value), float(cpu), int(rss or 0)))
    cases = []
    for (case, _server) in rows:
        if case not in cases:
            cases.append(case)
    summary = {}
    print(f"{'case':<28} {'server':<12} {'median':>11} {'range':>23} {'CPU %':>6} {'per CPU-s':>10} {'RSS MB':>7} {'ratio':>6}")
    for case in cases:
        servers = [s for (c, s) in rows if c == case]
        med = {}
        for server in servers:
            vals = rows[(case, server)]
            rates = [v for v, _, _ in vals]
            cpus = [c for _, c, _ in vals]
            m = statistics.median(rates)
            cpu = statistics.median(cpus)
            per_cpu = m / (cpu / 100) if cpu > 0 else 0
            rss = max(r for _, _, r in vals) / 1024
            med[server] = (m, per_cpu)
            summary.setdefault(case, {})[server] = {
                "median": m, "min": min(rates), "max": max(rates), "cpu_percent": cpu,
                "per_cpu_second": per_cpu, "rss_mb": rss, "runs": rates,
            }
        for server in servers:
            s = summary[case][server]
            ratio = ""
            if server == "hotpath" and len(servers) > 1:
                peer = [x for x in servers if x != "hotpath"][0]
                if med[peer][0] > 0:
                    ratio = f"{med['hotpath'][0] / med[peer][0]:.2f}x"
                    s["ratio"] = med["hotpath"][0] / med[peer][0]
                if med[peer][1] > 0:
                    s["ratio_per_cpu"] = med["hotpath"][1] / med[peer][1]
            rng = f"{s['min']:.0f}-{s['max']:.0f}"
            print(f"{case:<28} {server:<12} {s['median']:>11.1f} {rng:>23} {s['cpu_percent']:>6.1f} {s['per_cpu_second']:>10.0f} {s['rss_mb']:>7.1f} {ratio:>6}")
    with open(path.rsplit(".", 1)[0] + ".json", "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
