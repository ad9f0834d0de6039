"""``manage.py demo``: the embedded mode in one process, and what it keeps in ``var/``.

Owns the demo's run (``run``: migrate, apply the fleet, serve until Ctrl-C), its banner, its
operator credentials, its files in ``var/``, the embedded control loop, GeoDNS and agents
(``embedded``), and its request path of simulated servers, gateway and trace-replaying
clients (``traffic``). An entry point: it may import any unit of the app and the processes;
only the management commands import it.
"""
