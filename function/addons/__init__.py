"""One module per add-on; each declares its nodes, gates and Helm values."""
