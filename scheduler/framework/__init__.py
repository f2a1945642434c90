"""Layer 1: Session, Statement, registries, extension points and the tier rules."""
