"""Sluice: a Kubernetes scheduler for batch and AI workloads."""
