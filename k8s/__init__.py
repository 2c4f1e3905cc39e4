"""Kubernetes manifests for the service; `k8s.checks` validates them offline."""
