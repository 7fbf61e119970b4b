"""function-cluster-plugin: staged add-ons for Cluster API clusters on AWS, as a Crossplane function."""
