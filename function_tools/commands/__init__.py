"""The commands of ``function-cluster-plugin``, one click command per module.

Each module holds its command, the options only it has, and the few lines that turn files into
what its logic module takes (``function_tools/render.py``, ``simulate.py``, ``issuer.py``,
``aws/preflight.py``...) and its result into output. ``function_tools/cli.py`` registers them,
``serve`` from ``function/serve.py``; the shared options come from ``function_tools/options.py``.
A module here imports only click, the options and light runtime modules at module level, and
its logic when the command runs, so ``serve``'s cold start pays nothing for the others.
"""
