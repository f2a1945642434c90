"""Layer 3: the scheduling cycle and the background executors it hands effects to."""
