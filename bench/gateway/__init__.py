"""Gateway benchmarks: overhead, instructions, streams, traces, faults, abuse, aiperf."""
