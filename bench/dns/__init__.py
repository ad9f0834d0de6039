"""DNS benchmarks: the GeoDNS server alone, and against PowerDNS and gdnsd (geodns)."""
