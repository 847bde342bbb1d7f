"""Reads a /metrics page on stdin and checks it with the Prometheus Python client's own
text-format parser, then what the parser lets pass: one HELP and TYPE per metric, before its
samples; no series twice; histogram buckets cumulative, ending at +Inf with _count.
Prints one line per metric family; exits 1 naming the first problem."""
import math
import sys

from prometheus_client.parser import text_string_to_metric_families

text = sys.stdin.read()
problems = []

# What the parser does not check: each metric's HELP and TYPE come once, before its samples.
seen_help, seen_type, sampled = set(), set(), set()
for line in text.splitlines():
    if line.startswith("# HELP "):
        name = line.split(" ", 3)[2]
        if name in seen_help:
            problems.append(f"HELP twice for {name}")
        seen_help.add(name)
    elif line.startswith("# TYPE "):
        name = line.split(" ", 3)[2]
        if name in seen_type:
            problems.append(f"TYPE twice for {name}")
        if name in sampled:
            problems.append(f"TYPE after samples of {name}")
        seen_type.add(name)
    elif line and not line.startswith("#"):
        sampled.add(line.split("{", 1)[0].split(" ", 1)[0])

try:
    families = list(text_string_to_metric_families(text))
except Exception as e:  # the parser's own verdict
    print(f"not Prometheus text: {e}")
    sys.exit(1)

series = set()
for f in families:
    if not f.documentation:
        problems.append(f"{f.name}: no HELP")
    if f.type not in ("counter", "gauge", "histogram"):
        problems.append(f"{f.name}: type {f.type}")
    for s in f.samples:
        key = (s.name, tuple(sorted(s.labels.items())))
        if key in series:
            problems.append(f"series twice: {key}")
        series.add(key)
        if f.type == "counter" and (s.value < 0 or math.isnan(s.value)):
            problems.append(f"{s.name}: counter at {s.value}")
    if f.type == "histogram":
        groups = {}
        for s in f.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            groups.setdefault(labels, []).append(s)
        for labels, samples in groups.items():
            buckets = [s for s in samples if s.name.endswith("_bucket")]
            counts = [s.value for s in samples if s.name.endswith("_count")]
            values = [b.value for b in buckets]
            if values != sorted(values):
                problems.append(f"{f.name}{labels}: buckets not cumulative")
            if not buckets or buckets[-1].labels.get("le") != "+Inf":
                problems.append(f"{f.name}{labels}: no +Inf bucket last")
            elif counts != [buckets[-1].value]:
                problems.append(f"{f.name}{labels}: _count is not the +Inf bucket")
    print(f"{f.type} {f.name} {len(f.samples)}")

if problems:
    print("\n".join(problems))
    sys.exit(1)
