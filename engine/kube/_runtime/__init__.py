"""The runtime above the client: watchers, caches, informers, the cluster, status, finalizers, Events."""
