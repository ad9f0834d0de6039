"""Fleet configuration: the engine snapshot of the stored fleet, the cached fleet view every
process routes over, plan and apply of a fleet file with its safety valve, and the DNS
server's fleet source."""
