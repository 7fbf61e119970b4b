"""One module per add-on, each declaring its ``Addon`` (function/graph.py), and what they share.

Shared: ``cni`` (the CNI whichever installs it), ``iam`` (an add-on's IRSA role and its
release's gates), ``helm`` (Releases and owned values), ``security_groups`` (ports).
"""
