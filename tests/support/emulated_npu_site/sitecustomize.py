"""On PYTHONPATH (with tests/ beside it), every Python process starts with the emulated NPU.

Set up by support.torch_npu_emulator.activate.child_env; test support, not product.
"""

import os

if os.environ.get("EMULATED_NPU") == "1":
    from support.torch_npu_emulator.activate import activate_from_env

    activate_from_env()
