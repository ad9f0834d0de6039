"""Who is acting (a request's token, a CLI user, a task) and the append-only audit trail of
every configuration write."""
