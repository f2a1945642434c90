"""Layer 0: the domain model. Pure Python, no I/O, no asyncio, no Kubernetes client types."""
