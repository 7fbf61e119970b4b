"""The add-on kit: what the add-ons are built with, not add-ons themselves.

``helm`` (a Release's body, values merged over what the function owns), ``cni`` (the one CNI
node both CNI add-ons install), ``security_groups`` (the ports each add-on needs, composed or
reported) and ``iam`` (an add-on's IRSA or Pod Identity role, policy and attachment; it builds
on the ``irsa``, ``pod_identity`` and ``ccm`` add-ons, whose gates a role's release waits for).
Every other module of ``function/addons/`` is one add-on.
"""
