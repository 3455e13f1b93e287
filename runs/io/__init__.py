"""Export of a run (tables, TensorBoard events, its config) and import of an exported bundle.
No TensorFlow."""
