"""What credentials may do: RBAC rules a plugin declares and the permission checks at start."""
