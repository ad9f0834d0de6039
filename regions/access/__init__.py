"""Who may do what: roles, API and agent tokens (issued hashed), bearer authentication with
its cache, and the permission classes of the API."""
