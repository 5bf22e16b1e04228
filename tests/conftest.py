"""Test set-up shared by every tier.

The CUDA simulator must be chosen before numba is first imported, so it is chosen here: CPU machines (CI) run
kernels in the simulator; the device sets NUMBA_ENABLE_CUDASIM=0 and runs `pytest -m gpu`. The compile tier
runs in a subprocess with the simulator off (compile_ptx needs the real compiler, not a GPU).
"""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
