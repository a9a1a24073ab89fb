"""Coordination between replicas: Leases, leader election and the hash ring."""
