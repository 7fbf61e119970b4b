"""The version of function-cluster-plugin (read by hatch and by ``--version``)."""

__version__ = "0.2.0"
