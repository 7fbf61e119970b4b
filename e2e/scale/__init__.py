"""``make scale``: hundreds of ClusterPlugins on one function replica (``python -m e2e.scale``)."""
