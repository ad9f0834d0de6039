"""Engine benchmarks: the global table, one pick, the simulator's policies."""
