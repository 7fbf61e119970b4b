"""The tools around the function, apart from the runtime the image runs.

The CLI, the simulator, render, the in-memory Crossplane, code generation, packaging and the
AWS checks. They depend on the runtime (``function``); it never imports them.
"""
