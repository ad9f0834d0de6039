"""What a serving process needs of its host, whichever process it is.

Owns: ``env`` (typed settings read from the environment), ``heap`` (the garbage collector
kept off the latency-critical path), ``procs`` (whether a process or group is still there).
Imports: the standard library only; every process (the Django app, DNS server, gateway,
endpoint picker, harness) may import it.
"""
