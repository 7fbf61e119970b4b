"""A ClusterPlugin following its rollout: the ClusterPlugin's side of the fleet.

``pull`` reads the rollouts that select the XR and decides, alone, where it stands; ``target``
is what that means in one call (``CallContext.rollout``) and what the XR reports back in
``status.rollout``. The rollout's own side (its acceptance, its answer, the models both sides
read) is ``function/rollout/``.
"""
