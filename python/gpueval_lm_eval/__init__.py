"""gpueval's engine as lm-evaluation-harness's model `gpueval` (model.py), and the launcher
`gpueval-lm-eval` (cli.py), lm-eval's own command line with the model registered."""

from .engine import GpuevalError
from .model import GpuevalLM

__all__ = ["GpuevalLM", "GpuevalError"]
__version__ = "0.1.0"
