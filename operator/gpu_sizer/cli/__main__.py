"""``python -m gpu_sizer.cli``: the ``gpu-sizer`` console script without its wrapper."""

import sys

from gpu_sizer.cli import main

sys.exit(main())
