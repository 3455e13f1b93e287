"""lab_cli: the command line, `optimizer-lab {train,list,export,import} ...` (installed by
`pip install -e .`; `python -m lab_cli ...` is the same); its flags are generated from
`settings`. May import: runs, settings, optimizers.
"""

import lab_env  # noqa: F401  (Keras 2 before TensorFlow loads, for the entry point too)
