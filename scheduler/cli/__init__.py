"""Layer 5: the ``sluice`` command line."""
