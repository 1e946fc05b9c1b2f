"""`gpueval-lm-eval`: lm-eval's command line with the model `gpueval` registered. lm-eval 0.4 has no
entry point for models from other packages, so this registers GpuevalLM (importing the package does)
and hands every argument, unchanged, to lm-eval's own CLI. Two of lm-eval's own steps are made
faster, with the same results: its task index is cached between launches (task_index.py: 6 s of
every start-up on 2 cores), and each prompt template is compiled once (templates.py: 3 s of an
MMLU 5-shot run of 1,600 requests). A GpuevalError (no binary, a bad model
argument, a model gpueval cannot run, a failed run) ends it with its one line and exit status 1.
"""

from __future__ import annotations

import sys


def main() -> int:
    from lm_eval.__main__ import cli_evaluate

    from .engine import GpuevalError
    from . import model  # noqa: F401  registers `gpueval`
    from . import task_index, templates

    task_index.install()  # lm-eval's task index from the cache while its YAML files are unchanged
    templates.install()  # each prompt template compiled once, not once per document

    try:
        cli_evaluate()
    except GpuevalError as e:
        print(str(e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
