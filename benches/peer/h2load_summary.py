#!/usr/bin/env python3
"""One h2load run's figures, for the benches that run it beside quietbench.

    python3 benches/peer/h2load_summary.py H2LOAD_STDOUT [H2LOAD_LOG]

Prints "REQUESTS_PER_SEC P50_US P99_US FAILED". The percentiles come from h2load's per-request
log (--log-file: start time, status, microseconds to the end of the response), and are "-"
without one: the closed-loop runs write no log, whose writes would cost the loop.
"""

import os
import re
import statistics
import sys

out = open(sys.argv[1]).read()
rate = float(re.search(r"finished in \S+, ([0-9.]+) req/s", out).group(1))
failed = int(re.search(r"requests: .* (\d+) failed", out).group(1))
p50 = p99 = "-"
if len(sys.argv) > 2 and os.path.exists(sys.argv[2]):
    us = sorted(int(line.split("\t")[2]) for line in open(sys.argv[2]) if line.strip())
    q = statistics.quantiles(us, n=100, method="inclusive")
    p50, p99 = f"{q[49]:.1f}", f"{q[98]:.1f}"
print(f"{rate:.0f} {p50} {p99} {failed}")
