"""function-cluster-plugin: staged Cluster API add-ons on AWS, as a Crossplane function."""
