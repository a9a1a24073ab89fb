"""What users need to test their reconcilers: an embedded Kubernetes-compatible API server."""
