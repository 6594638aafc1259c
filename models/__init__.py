"""Built-in example models (installed as `shooting.models`)."""
