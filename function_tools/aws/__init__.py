"""AWS-side tooling: account preflight checks and the provider's least-privilege policy.

Nothing here runs inside the function: ``serve`` never talks to AWS. These are
commands an operator runs before (and after) installing a ClusterPlugin.
``boto3`` is needed only by ``preflight`` (the ``aws`` extra); ``provider-policy``
is pure.
"""
