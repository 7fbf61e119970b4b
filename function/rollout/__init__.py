"""Rolling out across a fleet: the ClusterPluginRollout and the ClusterPlugins that follow it."""
